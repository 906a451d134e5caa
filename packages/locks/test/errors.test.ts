import { RiggingError } from '@rigging/core';
import { describe, expect, it } from 'vitest';
import { FencingGuard, LocksError, Mutex } from '../src/index.js';

describe('LocksError', () => {
  it('is a RiggingError with a locks.* code, recognised across copies of the package', async () => {
    const m = new Mutex();
    const release = await m.acquire();
    const e = await m.acquire({ timeoutMs: 0 }).catch((err: unknown) => err);
    release();
    expect(e).toBeInstanceOf(LocksError);
    expect(LocksError.isInstance(e)).toBe(true);
    expect(RiggingError.isInstance(e)).toBe(true);
    expect(LocksError.hasCode(e, 'locks.timeout')).toBe(true);
    expect((e as LocksError).name).toBe('LocksError');
    expect(JSON.parse(JSON.stringify(e))).toMatchObject({
      name: 'LocksError',
      code: 'locks.timeout',
    });
    // another copy of @rigging/locks brands its errors with the same registered symbol
    const foreign = Object.defineProperty(new Error('x'), Symbol.for('rigging.locks.error'), {
      value: true,
    });
    expect(LocksError.isInstance(foreign)).toBe(true);
    expect(LocksError.isInstance(new RiggingError('locks.timeout', 'not ours'))).toBe(false);
    expect(LocksError.isInstance(null)).toBe(false);
  });

  it('a new error per throw', () => {
    const guard = new FencingGuard();
    guard.check('r', 5n);
    const errors = [1, 2].map(() => {
      try {
        guard.check('r', 4n);
      } catch (error) {
        return error;
      }
      return undefined;
    });
    expect(LocksError.hasCode(errors[0], 'locks.stale')).toBe(true);
    expect(errors[0]).not.toBe(errors[1]);
  });
});
