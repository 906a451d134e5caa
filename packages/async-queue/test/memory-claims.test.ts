// The memory backend's claims, called as the queue calls them: one running op per key, whichever
// way it was claimed (round robin or a key's own claim in sync mode), no claim before an op's
// retry time, none on a blocked key.
import { manualClock, silentLogger } from '@rigging/core';
import { describe, expect, it } from 'vitest';
import { memoryBackend, type QueueBackend } from '../src/index.js';
import type { Claim } from '../src/backend.js';

async function backendAt(start = 1_000) {
  const clock = manualClock(start);
  const backend = memoryBackend();
  await backend.attach({ clock, logger: silentLogger, wake: () => {}, settled: () => {} });
  const claim = async (limit = 10, key?: string): Promise<Claim[]> =>
    (
      await backend.claim({
        limit,
        key,
        leaseMs: 30_000,
        workerId: 'w',
        maxLeaseExpiries: 3,
        stopOnPoison: true,
      })
    ).claims;
  const enqueue = async (key: string, n: number) =>
    (await backend.enqueue({ key, type: 'run', payload: n })).op.id;
  return { backend, clock, claim, enqueue };
}

const payloads = (claims: Claim[]) => claims.map((c) => [c.op.key, c.op.payload]);

async function idle(backend: QueueBackend, key: string) {
  expect(await backend.keyStatus(key)).toBe('idle');
  expect(await backend.activeKeys(10)).toEqual([]);
}

describe('memory backend claims', () => {
  it('one head op per key, keys in turn, up to the limit', async () => {
    const { claim, enqueue } = await backendAt();
    for (const [key, n] of [
      ['a', 1],
      ['a', 2],
      ['b', 3],
      ['c', 4],
    ] as const)
      await enqueue(key, n);
    expect(payloads(await claim(2))).toEqual([
      ['a', 1],
      ['b', 3],
    ]);
    expect(payloads(await claim(10))).toEqual([['c', 4]]);
    expect(await claim(10)).toEqual([]);
  });

  it('a key claimed on its own while it waits its turn: its next op waits for the first', async () => {
    const { backend, claim, enqueue } = await backendAt();
    await enqueue('a', 1);
    await enqueue('a', 2);
    const [first] = await claim(1, 'a');
    expect(first?.op.payload).toBe(1);
    // the key's turn in the round robin comes while op 1 runs: nothing to claim
    expect(await claim(10)).toEqual([]);
    expect(await claim(1, 'a')).toEqual([]);
    expect(await backend.keyStatus('a')).toBe('run-in-progress');
    await backend.succeed(first!, 'ok');
    expect(payloads(await claim(10))).toEqual([['a', 2]]);
  });

  it('a key claimed on its own and finished before its turn: its turn claims nothing', async () => {
    const { backend, claim, enqueue } = await backendAt();
    await enqueue('a', 1);
    const [only] = await claim(1, 'a');
    await backend.succeed(only!, 'ok');
    expect(await claim(10)).toEqual([]);
    await idle(backend, 'a');
    // and the key is claimable again when a new op comes
    await enqueue('a', 2);
    expect(payloads(await claim(10))).toEqual([['a', 2]]);
  });

  it('an op given back for later is not claimed before its time, and is claimed at it', async () => {
    const { backend, clock, claim, enqueue } = await backendAt(1_000);
    await enqueue('a', 1);
    await enqueue('b', 2);
    const [a] = await claim(1, 'a');
    await backend.release(a!, { retryAt: 1_500 });
    expect(payloads(await claim(10))).toEqual([['b', 2]]);
    expect(await backend.nextDueAt()).toBe(1_500);
    await clock.advance(499);
    expect(await claim(10)).toEqual([]);
    expect(await claim(1, 'a')).toEqual([]);
    await clock.advance(1);
    expect(payloads(await claim(1, 'a'))).toEqual([['a', 1]]);
  });

  it('a failed attempt retried later waits for its retry time, and keeps its key', async () => {
    const { backend, clock, claim, enqueue } = await backendAt(1_000);
    await enqueue('a', 1);
    await enqueue('a', 2);
    const [a] = await claim(10);
    const error = { name: 'Error', message: 'flaky' };
    await backend.fail(a!, error, { retryAt: 2_000 });
    expect(await claim(10)).toEqual([]);
    await clock.advance(1_000);
    const [again] = await claim(10);
    expect(again?.op).toMatchObject({ payload: 1, attempts: 2 });
    expect(again!.token).toBeGreaterThan(a!.token);
  });

  it('a blocked key gives nothing to claim, even when its turn was already due', async () => {
    const { backend, claim, enqueue } = await backendAt();
    await enqueue('a', 1);
    await enqueue('a', 2);
    const [first] = await claim(1, 'a');
    const { cancelled, blocked } = (await backend.fail(
      first!,
      { name: 'Error', message: 'broken' },
      { stop: true },
    ))!;
    expect(blocked).toBe(true);
    expect(cancelled.map((op) => op.payload)).toEqual([2]);
    await enqueue('a', 3);
    expect(await claim(10)).toEqual([]);
    expect(await claim(1, 'a')).toEqual([]);
    expect(await backend.keyStatus('a')).toBe('blocked');
    expect(await backend.resume('a')).toBe(true);
    expect(payloads(await claim(10))).toEqual([['a', 3]]);
  });

  it("a key's own claim takes that key's head op only, never another key's", async () => {
    const { claim, enqueue } = await backendAt();
    await enqueue('b', 1);
    await enqueue('a', 2);
    expect(await claim(1, 'c')).toEqual([]);
    expect(payloads(await claim(1, 'a'))).toEqual([['a', 2]]);
    expect(payloads(await claim(10))).toEqual([['b', 1]]);
  });

  it('a key claim with a limit of 0 claims nothing', async () => {
    const { claim, enqueue } = await backendAt();
    await enqueue('a', 1);
    expect(await claim(0, 'a')).toEqual([]);
    expect(await claim(0)).toEqual([]);
    expect(payloads(await claim(1, 'a'))).toEqual([['a', 1]]);
  });
});
