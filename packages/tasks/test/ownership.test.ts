import { describe, expect, it } from 'vitest';
import { deferred, RiggingError, type Lease } from '@rigging/core';
import { Engine, linearFlow, memoryLog, task, type Task } from '../src/index.js';
import { testLocks } from './helpers.js';

function counted(names: string[], hang?: { name: string; until: Promise<unknown> }) {
  const runs = new Map<string, number>();
  const tasks = names.map(
    (name) =>
      task({
        name,
        execute: async () => {
          runs.set(name, (runs.get(name) ?? 0) + 1);
          if (hang?.name === name && runs.get(name) === 1) await hang.until;
          return name;
        },
      }) as Task,
  );
  return { runs, flow: linearFlow('owned', ...tasks) };
}

describe('ownership with a lock provider', () => {
  it('two engines racing to resume the same flow: exactly one runs it', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { runs, flow } = counted(['a', 'b', 'c', 'd'], { name: 'b', until: gate.promise });
    // A first engine starts the flow and vanishes while 'b' runs (its lease is lost with it).
    const first = new Engine({ log, locks: locks.provider });
    const firstRun = first.run(flow, { inputs: {}, flowId: 'race' }).catch((e: unknown) => e);
    await expect.poll(() => runs.get('b')).toBe(1);
    locks.lose('rigging-tasks:race');

    const e1 = new Engine({ log, locks: locks.provider });
    const e2 = new Engine({ log, locks: locks.provider });
    const results = await Promise.allSettled([e1.resume('race', flow), e2.resume('race', flow)]);
    const ok = results.filter((r) => r.status === 'fulfilled');
    const busy = results.filter(
      (r) => r.status === 'rejected' && RiggingError.hasCode(r.reason, 'tasks.flow_busy'),
    );
    expect(ok).toHaveLength(1);
    expect(busy).toHaveLength(1);
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 2, c: 1, d: 1 });

    // The vanished engine's late write carries a stale fencing token and is refused.
    gate.resolve();
    const stale = (await firstRun) as RiggingError;
    expect(stale.code).toBe('tasks.ownership_lost');
    expect(RiggingError.hasCode(stale.cause, 'tasks.fenced')).toBe(true);
    const history = await log.history('race');
    expect(history.filter((h) => h.task === 'b' && h.state === 'SUCCESS')).toHaveLength(1);
    expect(history.at(-1)).toMatchObject({ task: null, state: 'SUCCESS' });
    const tokens = history.map((h) => h.token!);
    expect(tokens[0]).toBe(1n);
    expect(tokens.at(-1)).toBeGreaterThan(1n);
  });

  it('stops at the next task boundary when the lease is lost; a stale owner is fenced', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { runs, flow } = counted(['a', 'b', 'c'], { name: 'b', until: gate.promise });
    const a = new Engine({ log, locks: locks.provider });
    const running = a.run(flow, { inputs: {}, flowId: 'lost' }).catch((e: unknown) => e);
    await expect.poll(() => runs.get('b')).toBe(1);
    locks.lose('rigging-tasks:lost');
    // Nobody took over yet: 'b' completes and is recorded, 'c' does not start.
    gate.resolve();
    const err = await running;
    expect(RiggingError.hasCode(err, 'tasks.ownership_lost')).toBe(true);
    expect(runs.get('c')).toBeUndefined();
    expect(await new Engine({ log, locks: locks.provider }).resume('lost', flow)).toEqual({});
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1, c: 1 });
    // A write with the first owner's token is refused now.
    const err2 = await log
      .append('lost', [{ seq: 999, task: 'x', state: 'RUNNING', at: 0, token: 1n }], { token: 1n })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(err2, 'tasks.fenced')).toBe(true);
  });

  it('refuses a second run of a flow id held by this engine', async () => {
    const gate = deferred<void>();
    const { flow } = counted(['a'], { name: 'a', until: gate.promise });
    const engine = new Engine();
    const first = engine.run(flow, { inputs: {}, flowId: 'same' });
    await expect(engine.run(flow, { inputs: {}, flowId: 'same' })).rejects.toThrow(
      /already running/,
    );
    expect(engine.running).toEqual(['same']);
    gate.resolve();
    await first;
    await expect(engine.run(flow, { inputs: {}, flowId: 'same' })).rejects.toMatchObject({
      code: 'tasks.flow_exists',
    });
  });
});

/** A lease held by the caller (as a queue's claim is): never released by the engine. */
function callerLease(token: bigint, key = 'k') {
  const lost = new AbortController();
  let releases = 0;
  const release = () => {
    releases++;
    return Promise.resolve();
  };
  const lease: Lease = {
    key,
    mode: 'exclusive',
    token,
    lost: lost.signal,
    release,
    [Symbol.asyncDispose]: release,
  };
  return { lease, lose: () => lost.abort(new Error('claim lost')), releases: () => releases };
}

describe("ownership under the caller's lease", () => {
  it('takes no lock, fences every write with the lease token and never releases the lease', async () => {
    const log = memoryLog();
    const locks = testLocks();
    // Another engine holds the flow's own lock: a run under a caller's lease does not need it.
    await locks.provider.tryAcquire('rigging-tasks:claimed');
    const { runs, flow } = counted(['a', 'b']);
    const held = callerLease(7n);
    const engine = new Engine({ log, locks: locks.provider });
    await engine.run(flow, { inputs: {}, flowId: 'claimed', lease: held.lease });
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1 });
    expect(new Set((await log.history('claimed')).map((h) => h.token))).toEqual(new Set([7n]));
    expect(held.releases()).toBe(0);
  });

  it('stops at the next task boundary when the lease is lost; a lower token is fenced', async () => {
    const log = memoryLog();
    const gate = deferred<void>();
    const { runs, flow } = counted(['a', 'b', 'c'], { name: 'b', until: gate.promise });
    const engine = new Engine({ log });
    const first = callerLease(3n);
    const running = engine
      .runOrResume(flow, { flowId: 'moved', inputs: {}, lease: first.lease })
      .catch((e: unknown) => e);
    await expect.poll(() => runs.get('b')).toBe(1);
    first.lose();
    gate.resolve();
    expect(RiggingError.hasCode(await running, 'tasks.ownership_lost')).toBe(true);
    expect(runs.get('c')).toBeUndefined();

    // A holder with a lower token than the flow has seen is refused before it runs anything.
    const stale = await new Engine({ log })
      .resume('moved', flow, { lease: callerLease(2n).lease })
      .catch((e: unknown) => e as RiggingError);
    const fenced = (e: unknown) =>
      RiggingError.hasCode(e, 'tasks.fenced') ||
      RiggingError.hasCode((e as { cause?: unknown }).cause, 'tasks.fenced');
    expect(fenced(stale)).toBe(true);
    expect(runs.get('c')).toBeUndefined();

    // The next holder (a higher token) resumes it; the completed tasks are not run again.
    const next = callerLease(4n);
    await engine.runOrResume(flow, { flowId: 'moved', inputs: {}, lease: next.lease });
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1, c: 1 });
  });

  it('refuses a lease without a bigint token', async () => {
    const { flow } = counted(['a']);
    const bad = { ...callerLease(1n).lease, token: 1 } as unknown as Lease;
    await expect(new Engine().run(flow, { inputs: {}, lease: bad })).rejects.toThrow(TypeError);
  });
});
