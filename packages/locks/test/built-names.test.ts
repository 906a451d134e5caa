// The built package, as users load it: its error class prints its own name everywhere (a bundler
// that renames classes referring to themselves would print `_LocksError`).
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';

describe('dist/ error class name', () => {
  it('LocksError prints as LocksError in String(), name, constructor.name, stack and util.inspect', async () => {
    const { LocksError } = await import('../dist/index.js');
    const error = new LocksError('locks.closed', 'it broke');
    expect(LocksError.name).toBe('LocksError');
    expect(error.constructor.name).toBe('LocksError');
    expect(error.name).toBe('LocksError');
    expect(String(error)).toBe('LocksError: it broke');
    expect(error.stack?.split('\n')[0]).toBe('LocksError: it broke');
    expect(inspect(error).split('\n')[0]).toBe('LocksError: it broke');
    expect(inspect(error)).not.toMatch(/_LocksError/);
  });
});
