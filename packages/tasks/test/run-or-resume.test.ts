import { describe, expect, it } from 'vitest';
import { deferred, RiggingError, type Deferred } from '@rigging/core';
import { Engine, linearFlow, memoryLog, task, type Task } from '../src/index.js';
import { testLocks } from './helpers.js';

/** A linear flow whose tasks count their runs; `hold` makes a task's first run wait for a gate. */
function counted(names: string[], hold?: { name: string; gate: Deferred<void> }) {
  const runs = new Map<string, number>();
  const started = new Map<string, Deferred<void>>(names.map((n) => [n, deferred<void>()]));
  const tasks = names.map(
    (name) =>
      task({
        name,
        provides: name,
        execute: async (ctx) => {
          runs.set(name, (runs.get(name) ?? 0) + 1);
          started.get(name)!.resolve();
          if (hold?.name === name && runs.get(name) === 1) await hold.gate.promise;
          ctx.signal.throwIfAborted();
          return `${name}!`;
        },
      }) as Task,
  );
  return { runs, started, flow: linearFlow('counted', ...tasks) };
}

describe('engine.runOrResume', () => {
  it('runs a new flow, then returns the outcome of the finished one without running it again', async () => {
    const engine = new Engine();
    const { runs, flow } = counted(['a', 'b']);
    const first = await engine.runOrResume(flow, { flowId: 'f1', inputs: {} });
    expect(first).toEqual({ a: 'a!', b: 'b!' });
    const second = await engine.runOrResume(flow, { flowId: 'f1', inputs: {} });
    expect(second).toEqual(first);
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1 });
  });

  it('resumes a flow the log already has (tasks.flow_exists): completed tasks are not run again', async () => {
    const log = memoryLog();
    const gate = deferred<void>();
    const { runs, started, flow } = counted(['a', 'b', 'c'], { name: 'b', gate });
    const first = new Engine({ log });
    const running = first.run(flow, { flowId: 'f2', inputs: {} }).catch((e: unknown) => e);
    await started.get('b')!.promise;
    const suspending = first.suspend('f2');
    gate.resolve();
    await suspending;
    expect(RiggingError.hasCode(await running, 'tasks.suspended')).toBe(true);

    const out = await new Engine({ log }).runOrResume(flow, { flowId: 'f2', inputs: {} });
    expect(out).toEqual({ a: 'a!', b: 'b!', c: 'c!' });
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1, c: 1 });
  });

  it('waits out tasks.flow_busy while another engine owns the flow, then takes its outcome', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { runs, started, flow } = counted(['a', 'b'], { name: 'a', gate });
    const owner = new Engine({ log, locks: locks.provider });
    const owned = owner.run(flow, { flowId: 'f3', inputs: {} });
    await started.get('a')!.promise;

    const other = new Engine({ log, locks: locks.provider });
    const busy = await other.run(flow, { flowId: 'f3', inputs: {} }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(busy, 'tasks.flow_busy')).toBe(true);
    let settled = false;
    const waiting = other.runOrResume(flow, { flowId: 'f3', inputs: {}, pollMs: 5 }).finally(() => {
      settled = true;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(settled).toBe(false); // still waiting: not failed with flow_busy
    gate.resolve();
    expect(await owned).toEqual({ a: 'a!', b: 'b!' });
    expect(await waiting).toEqual({ a: 'a!', b: 'b!' });
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1 });
  });

  it('takes over when the owner loses its lease mid-flow, without re-running completed tasks', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { runs, started, flow } = counted(['a', 'b', 'c'], { name: 'b', gate });
    const owner = new Engine({ log, locks: locks.provider });
    const owned = owner.run(flow, { flowId: 'f4', inputs: {} }).catch((e: unknown) => e);
    await started.get('b')!.promise;
    const waiting = new Engine({ log, locks: locks.provider }).runOrResume(flow, {
      flowId: 'f4',
      inputs: {},
      pollMs: 5,
    });
    locks.lose('rigging-tasks:f4');
    expect(await waiting).toEqual({ a: 'a!', b: 'b!', c: 'c!' });
    gate.resolve();
    expect(RiggingError.hasCode(await owned, 'tasks.ownership_lost')).toBe(true);
    // 'b' ran twice (it was in flight when the lease was lost); 'a' and 'c' once.
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 2, c: 1 });
  });

  it('refuses a changed definition exactly as resume does', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    const { flow } = counted(['a', 'b']);
    await engine.runOrResume(flow, { flowId: 'f5', inputs: {} });
    const { flow: changed } = counted(['a', 'b', 'c']);
    const viaResume = await engine.resume('f5', changed).catch((e: unknown) => e);
    const viaRunOrResume = await engine
      .runOrResume(changed, { flowId: 'f5', inputs: {} })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(viaRunOrResume, 'tasks.incompatible_log')).toBe(true);
    expect((viaRunOrResume as Error).message).toBe((viaResume as Error).message);
  });

  it('its signal ends the waiting with the signal reason', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { started, flow } = counted(['a'], { name: 'a', gate });
    const owned = new Engine({ log, locks: locks.provider }).run(flow, {
      flowId: 'f6',
      inputs: {},
    });
    await started.get('a')!.promise;
    const stop = new AbortController();
    const waiting = new Engine({ log, locks: locks.provider })
      .runOrResume(flow, { flowId: 'f6', inputs: {}, pollMs: 5, signal: stop.signal })
      .catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 20));
    const reason = new Error('shutting down');
    stop.abort(reason);
    expect(await waiting).toBe(reason);
    gate.resolve();
    await owned;
  });

  it('its signal suspends a running flow (nothing reverted); a second call resumes it', async () => {
    const reverted: string[] = [];
    const gate = deferred<void>();
    const { runs, started, flow: base } = counted(['a', 'b', 'c'], { name: 'b', gate });
    const flow = linearFlow(
      'counted',
      ...base.children.map((t) =>
        task({
          name: t.name,
          provides: t.name,
          execute: (ctx, inputs) => (t as Task).execute(ctx, inputs),
          revert: () => {
            reverted.push(t.name);
          },
        }),
      ),
    );
    const engine = new Engine();
    const stop = new AbortController();
    const first = engine
      .runOrResume(flow, { flowId: 'f7', inputs: {}, signal: stop.signal })
      .catch((e: unknown) => e);
    await started.get('b')!.promise;
    stop.abort(new Error('give it back'));
    gate.resolve();
    expect(RiggingError.hasCode(await first, 'tasks.suspended')).toBe(true);
    expect((await engine.log.load('f7'))!.record.state).toBe('SUSPENDED');
    expect(reverted).toEqual([]);
    const out = await engine.runOrResume(flow, { flowId: 'f7', inputs: {} });
    expect(out).toEqual({ a: 'a!', b: 'b!', c: 'c!' });
    expect(Object.fromEntries(runs)).toEqual({ a: 1, b: 1, c: 1 });
  });

  it('its signal suspends a flow whose lease is still being taken when it aborts', async () => {
    const log = memoryLog();
    const { runs, flow } = counted(['a', 'b']);
    const slowGrant = deferred<void>();
    const locks = testLocks();
    const provider = {
      acquire: locks.provider.acquire,
      async tryAcquire(key: string) {
        await slowGrant.promise;
        return locks.provider.tryAcquire(key);
      },
    };
    const engine = new Engine({ log, locks: provider });
    const stop = new AbortController();
    const first = engine
      .runOrResume(flow, { flowId: 'f8', inputs: {}, signal: stop.signal })
      .catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 5));
    stop.abort(new Error('stop'));
    slowGrant.resolve();
    expect(RiggingError.hasCode(await first, 'tasks.suspended')).toBe(true);
    expect(runs.get('b')).toBeUndefined();
  });

  it('cancel reverts the completed tasks, as run({ signal }) does', async () => {
    const gate = deferred<void>();
    const { started, flow } = counted(['a', 'b'], { name: 'b', gate });
    const engine = new Engine();
    const cancel = new AbortController();
    const first = engine
      .runOrResume(flow, { flowId: 'f9', inputs: {}, cancel: cancel.signal })
      .catch((e: unknown) => e);
    await started.get('b')!.promise;
    cancel.abort(new Error('no longer wanted'));
    gate.resolve();
    expect(RiggingError.hasCode(await first, 'tasks.cancelled')).toBe(true);
    expect((await engine.log.load('f9'))!.record.state).toBe('CANCELLED');
  });

  it('refuses bad options before running anything', async () => {
    const engine = new Engine();
    const { runs, flow } = counted(['a']);
    await expect(engine.runOrResume(flow, { flowId: '', inputs: {} })).rejects.toThrow(TypeError);
    await expect(engine.runOrResume(flow, { flowId: 'x', inputs: {}, pollMs: -1 })).rejects.toThrow(
      TypeError,
    );
    expect(runs.size).toBe(0);
  });
});

describe('engine.resume({ inputs })', () => {
  it('merges the given inputs over the stored ones, key by key', async () => {
    const seen: unknown[] = [];
    const gate = deferred<void>();
    const started = deferred<void>();
    const first = task({
      name: 'first',
      provides: 'done',
      execute: async () => {
        started.resolve();
        await gate.promise;
        return true;
      },
    });
    const second = task({
      name: 'second',
      requires: ['done', 'region', 'size'],
      execute: (_ctx, inputs: { done: boolean; region: string; size: number }) => {
        seen.push({ region: inputs.region, size: inputs.size });
      },
    });
    const flow = linearFlow('merge', first, second);
    const engine = new Engine();
    const running = engine
      .run(flow, { flowId: 'm', inputs: { region: 'eu', size: 1 } })
      .catch((e: unknown) => e);
    await started.promise;
    const suspended = engine.suspend('m');
    gate.resolve();
    await suspended;
    await running;
    await engine.resume('m', flow, { inputs: { size: 2 } });
    expect(seen).toEqual([{ region: 'eu', size: 2 }]);
  });
});
