import { manualClock, type Backoff } from '@rigging/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createQueue, memoryBackend, type BackoffOptions } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';
import type { Database } from '@rigging/sql';

const handlers = { noop: (_p: null) => null };

describe('options are checked before anything starts', () => {
  it.each([
    ['concurrency', { concurrency: -1 }],
    ['concurrency', { concurrency: 1.5 }],
    ['leaseMs', { leaseMs: 0 }],
    ['leaseMs', { leaseMs: Infinity }],
    ['heartbeatMs', { heartbeatMs: -5 }],
    ['maxLeaseExpiries', { maxLeaseExpiries: 2.5 }],
    ['closeGraceMs', { closeGraceMs: -1 }],
    ['closeAbortWaitMs', { closeAbortWaitMs: Number.NaN }],
    ['policy.maxAttempts', { policy: { maxAttempts: 0 } }],
    ['backoff.initialMs', { policy: { backoff: { initialMs: -1 } } }],
    ['backoff.factor', { policy: { backoff: { factor: 0.5 } } }],
    ['backoff.jitter', { policy: { backoff: { jitter: 2 } } }],
    ['retention.maxCount', { retention: { maxCount: -1 } }],
    ['retention.maxAgeMs', { retention: { maxAgeMs: Number.NaN } }],
  ])('%s', (name, bad) => {
    expect(() => createQueue({ handlers, ...(bad as object) })).toThrow(
      new RegExp(`^createQueue: ${name.replace('.', '\\.')} must be`),
    );
  });

  it('backends name their own options', () => {
    expect(() => memoryBackend({ maxFinished: -1 })).toThrow(/^memoryBackend: maxFinished/);
    const database = { dialect: 'sqlite', db: {} } as unknown as Database;
    expect(() => sqlBackend(database, { pollMs: 0 })).toThrow(/^sqlBackend: pollMs/);
  });
});

describe('per-call options are checked on every call', () => {
  it('limits, retention and timeouts', async () => {
    await using q = createQueue({ handlers });
    await expect(q.activeKeys({ limit: -1 })).rejects.toThrow(/queue\.activeKeys: limit/);
    await expect(q.deadLetters({ limit: 0.5 })).rejects.toThrow(/queue\.deadLetters: limit/);
    await expect(q.prune({ maxCount: -2 })).rejects.toThrow(/queue\.prune: retention\.maxCount/);
    // Not waiting at all (the op is already done) does not skip the check.
    const id = await q.cast('k', { type: 'noop', payload: null });
    await q.onIdle();
    await expect(q.wait(id, { timeoutMs: -1 })).rejects.toThrow(/queue\.wait: timeoutMs/);
    await expect(q.onIdle({ timeoutMs: Number.NaN })).rejects.toThrow(/queue\.onIdle: timeoutMs/);
    await expect(q.call('k', { type: 'noop', payload: null }, { timeoutMs: -3 })).rejects.toThrow(
      /queue\.call: timeoutMs/,
    );
    expect(await q.activeKeys()).toEqual([]);
  });

  it('onIdle times out with async-queue.timeout, as call and wait do', async () => {
    await using q = createQueue({
      closeGraceMs: 0,
      handlers: {
        hang: (_p: null, ctx) =>
          new Promise<null>((_, reject) =>
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)),
          ),
      },
    });
    await q.cast('k', { type: 'hang', payload: null });
    await expect(q.onIdle({ timeoutMs: 20 })).rejects.toMatchObject({
      code: 'async-queue.timeout',
    });
  });
});

/** The delays a queue schedules between the attempts of one always-failing op. */
async function retryDelays(backoff: Backoff | undefined, attempts: number): Promise<number[]> {
  const clock = manualClock(1_000_000);
  const q = createQueue({
    clock,
    policy: { maxAttempts: attempts, onFailure: 'continue', backoff },
    handlers: {
      fail: (_p: null) => {
        throw new Error('no');
      },
    },
  });
  const delays: number[] = [];
  q.on('op:retrying', ({ retryAt }) => delays.push(retryAt - clock.now()));
  const done = q.call('k', { type: 'fail', payload: null }).catch(() => undefined);
  // Each retry is scheduled at `retryAt`: move time there, and no further, for the next attempt.
  for (let advanced = 0; advanced < attempts - 1;) {
    await clock.advance(0);
    if (delays.length > advanced) await clock.advance(delays[advanced++]!);
  }
  await done;
  await q.close();
  return delays;
}

describe('backoff takes the shapes of core`s Backoff', () => {
  it('exponential settings (the deprecated BackoffOptions name still compiles)', async () => {
    const settings: BackoffOptions = { initialMs: 10, factor: 3, maxMs: 200 };
    expect(await retryDelays(settings, 5)).toEqual([10, 30, 90, 200]);
  });

  it('a function of the retry number, and a fixed delay', async () => {
    expect(await retryDelays((n) => n * 7, 4)).toEqual([7, 14, 21]);
    expect(await retryDelays(25, 3)).toEqual([25, 25]);
  });

  it('defaults: 100 ms doubling', async () => {
    expect(await retryDelays(undefined, 4)).toEqual([100, 200, 400]);
  });

  it('jitter stays within its spread and the cap', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 1000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (initialMs, jitter) => {
          const [d] = await retryDelays({ initialMs, jitter, maxMs: 800 }, 2);
          const base = Math.min(800, initialMs);
          expect(d).toBeGreaterThanOrEqual(base * (1 - jitter) - 1e-9);
          expect(d).toBeLessThanOrEqual(Math.min(800, base * (1 + jitter)) + 1e-9);
        },
      ),
      { numRuns: 30 },
    );
  });
});
