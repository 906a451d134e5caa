import { describe, expect, it } from 'vitest';
import { deferred, RiggingError } from '@rigging/core';
import {
  alternatives,
  Engine,
  FlowFailed,
  graphFlow,
  linearFlow,
  memoryLog,
  task,
  type LogEntry,
  type Task,
  type TaskLog,
} from '../src/index.js';
import { testLocks } from './helpers.js';

/** `inner`, whose appends fail (a lost database) while `down(entries)` says so. */
function outage(inner: TaskLog, down: (entries: LogEntry[]) => boolean): TaskLog {
  return {
    create: (record, entries) => inner.create(record, entries),
    append: (flowId, entries, update) =>
      down(entries)
        ? Promise.reject(new Error('log unreachable'))
        : inner.append(flowId, entries, update),
    load: (flowId) => inner.load(flowId),
    history: (flowId) => inner.history(flowId),
    flows: (options) => inner.flows(options),
    remove: (flowId) => inner.remove(flowId),
  };
}

/** Two independent tasks `a` and `b` (b completes last) and `c`, needing both, that fails. */
function fork(events: string[], revertFails?: string) {
  const leg = (name: string): Task =>
    task({
      name,
      provides: name,
      execute: () => name,
      revert: () => {
        events.push(`revert ${name}`);
        if (name === revertFails) throw new Error(`${name} revert broke`);
      },
    }) as Task;
  const join = task({
    name: 'c',
    requires: ['a', 'b'],
    execute: () => {
      throw new Error('c broke');
    },
  });
  return graphFlow('fork', leg('a'), leg('b'), join);
}

const revertsOf = (error: unknown) =>
  (error as FlowFailed).reverts.map((r) => `${r.task}:${r.state}`);

describe('reverting: what a rollback guarantees', () => {
  it('a flow stopped at a failed revert is resumable: the failed revert runs again, then the rest; nothing is reverted twice', async () => {
    const log = memoryLog();
    const events: string[] = [];
    let broken = true;
    const make = (name: string, opts: { fail?: boolean; revertFails?: boolean } = {}): Task =>
      task({
        name,
        execute: () => {
          if (opts.fail) throw new Error(`${name} broke`);
          return name;
        },
        revert: () => {
          events.push(`revert ${name}`);
          if (opts.revertFails && broken) throw new Error(`${name} revert broke`);
        },
      }) as Task;
    const flow = linearFlow(
      'f',
      make('a'),
      make('b', { revertFails: true }),
      make('c'),
      make('d', { fail: true }),
    );
    const engine = new Engine({ log });
    const first = await engine.run(flow, { inputs: {}, flowId: 'rf' }).catch((e: unknown) => e);
    expect((first as FlowFailed).code).toBe('tasks.revert_failed');
    expect(events).toEqual(['revert c', 'revert b']);
    expect((await log.load('rf'))!.record.state).toBe('REVERT_FAILURE');

    broken = false;
    const second = await engine.resume('rf', flow).catch((e: unknown) => e);
    expect((second as FlowFailed).code).toBe('tasks.flow_failed');
    expect(events).toEqual(['revert c', 'revert b', 'revert b', 'revert a']);
    expect(revertsOf(second)).toEqual(['c:REVERTED', 'b:REVERTED', 'a:REVERTED']);
    expect((await log.load('rf'))!.record.state).toBe('REVERTED');
  });

  it('a revert suspended half-way continues on resume with the tasks not reverted yet, in the same order', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    const events: string[] = [];
    let suspended: Promise<boolean> | undefined;
    const make = (name: string, opts: { fail?: boolean; suspend?: boolean } = {}): Task =>
      task({
        name,
        execute: () => {
          if (opts.fail) throw new Error(`${name} broke`);
          return name;
        },
        revert: () => {
          events.push(`revert ${name}`);
          if (opts.suspend && !suspended) suspended = engine.suspend('sr');
        },
      }) as Task;
    const flow = linearFlow(
      'f',
      make('a'),
      make('b'),
      make('c', { suspend: true }),
      make('d'),
      make('e', { fail: true }),
    );
    const first = await engine.run(flow, { inputs: {}, flowId: 'sr' }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(first, 'tasks.suspended')).toBe(true);
    expect(await suspended).toBe(true);
    expect(events).toEqual(['revert d', 'revert c']);
    expect((await log.load('sr'))!.record.state).toBe('SUSPENDED');

    const second = await engine.resume('sr', flow).catch((e: unknown) => e);
    expect((second as FlowFailed).code).toBe('tasks.flow_failed');
    expect((second as FlowFailed).failures[0]).toMatchObject({ task: 'e', message: 'e broke' });
    expect(events).toEqual(['revert d', 'revert c', 'revert b', 'revert a']);
    expect(revertsOf(second)).toEqual(['d:REVERTED', 'c:REVERTED', 'b:REVERTED', 'a:REVERTED']);
  });

  it('cancelling a flow that is already reverting does not cut the rollback short', async () => {
    const ac = new AbortController();
    const events: string[] = [];
    const make = (name: string, opts: { fail?: boolean; cancel?: boolean } = {}): Task =>
      task({
        name,
        execute: () => {
          if (opts.fail) throw new Error(`${name} broke`);
          return name;
        },
        revert: () => {
          events.push(`revert ${name}`);
          if (opts.cancel) ac.abort(new Error('user cancelled'));
        },
      }) as Task;
    const flow = linearFlow(
      'f',
      make('a'),
      make('b'),
      make('c', { cancel: true }),
      make('d', { fail: true }),
    );
    const error = await new Engine()
      .run(flow, { inputs: {}, signal: ac.signal })
      .catch((e: unknown) => e);
    expect(events).toEqual(['revert c', 'revert b', 'revert a']);
    expect(revertsOf(error)).toEqual(['c:REVERTED', 'b:REVERTED', 'a:REVERTED']);
  });

  it('a lease lost while reverting starts no further revert; the next owner finishes the rollback', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const events: string[] = [];
    const gate = deferred<void>();
    let hang = true;
    const make = (name: string, opts: { fail?: boolean; hang?: boolean } = {}): Task =>
      task({
        name,
        execute: () => {
          if (opts.fail) throw new Error(`${name} broke`);
          return name;
        },
        revert: async () => {
          events.push(`revert ${name}`);
          if (opts.hang && hang) {
            hang = false;
            await gate.promise;
          }
        },
      }) as Task;
    const flow = linearFlow(
      'f',
      make('a'),
      make('b', { hang: true }),
      make('c'),
      make('d', { fail: true }),
    );
    const running = new Engine({ log, locks: locks.provider })
      .run(flow, { inputs: {}, flowId: 'll' })
      .catch((e: unknown) => e);
    await expect.poll(() => events.length).toBe(2);
    locks.lose('rigging-tasks:ll');
    gate.resolve();
    expect(RiggingError.hasCode(await running, 'tasks.ownership_lost')).toBe(true);
    expect(events).toEqual(['revert c', 'revert b']);

    const next = await new Engine({ log, locks: locks.provider })
      .resume('ll', flow)
      .catch((e: unknown) => e);
    expect((next as FlowFailed).code).toBe('tasks.flow_failed');
    // b completed its revert before the stop was seen: recorded, not run again.
    expect(events).toEqual(['revert c', 'revert b', 'revert a']);
  });

  it('revert receives the inputs and parameters of the attempt it undoes; a task without revert is reverted in its turn', async () => {
    const seen: unknown[] = [];
    const events: string[] = [];
    const first = task({
      name: 'first',
      requires: ['region'],
      provides: 'vm',
      execute: (_ctx, { region }: { region: string }) => `vm-in-${region}`,
      revert: (_ctx, { result, inputs }) => {
        events.push('revert first');
        seen.push({ task: 'first', result, inputs });
      },
    });
    let tries = 0;
    const sized = task({
      name: 'sized',
      requires: ['vm'],
      provides: 'disk',
      retry: alternatives([{ size: 1 }, { size: 2 }]),
      execute: (ctx, { vm }: { vm: string }) => {
        if (++tries === 1) throw new Error('too small');
        return `${vm}-disk-${String((ctx.params as { size: number }).size)}`;
      },
      revert: (ctx, { result, inputs }) => {
        events.push('revert sized');
        seen.push({ task: 'sized', result, inputs, params: ctx.params });
      },
    });
    const plain = task({
      name: 'plain',
      requires: ['disk'],
      provides: 'dns',
      execute: () => 'dns',
    });
    const last = task({
      name: 'last',
      requires: ['dns'],
      execute: () => {
        throw new Error('last broke');
      },
    });
    const log = memoryLog();
    const error = await new Engine({ log })
      .run(linearFlow('f', first, sized, plain, last), {
        inputs: { region: 'eu' },
        flowId: 'in',
      })
      .catch((e: unknown) => e);
    expect(revertsOf(error)).toEqual(['plain:REVERTED', 'sized:REVERTED', 'first:REVERTED']);
    expect(events).toEqual(['revert sized', 'revert first']);
    expect(seen).toEqual([
      {
        task: 'sized',
        result: 'vm-in-eu-disk-2',
        inputs: { vm: 'vm-in-eu', size: 2 },
        params: { size: 2 },
      },
      { task: 'first', result: 'vm-in-eu', inputs: { region: 'eu' } },
    ]);
    // A task without revert has no REVERTING, only its REVERTED.
    const plainStates = (await log.history('in'))
      .filter((e) => e.task === 'plain')
      .map((e) => e.state);
    expect(plainStates).toEqual(['RUNNING', 'SUCCESS', 'REVERTED']);
  });

  it('with concurrency > 1, a finished revert is durable while another revert still runs', async () => {
    const log = memoryLog();
    const slowGate = deferred<void>();
    const order: string[] = [];
    const leaf = (name: string, slow: boolean): Task =>
      task({
        name,
        requires: ['root'],
        provides: name,
        execute: () => name,
        revert: async () => {
          order.push(`start ${name}`);
          if (slow) await slowGate.promise;
          order.push(`end ${name}`);
        },
      }) as Task;
    const root = task({
      name: 'root',
      provides: 'root',
      execute: () => 'root',
      revert: () => {
        order.push('revert root');
      },
    });
    const fail = task({
      name: 'fail',
      requires: ['fast', 'slow'],
      execute: () => {
        throw new Error('fail broke');
      },
    });
    const running = new Engine({ log, concurrency: 2 })
      .run(graphFlow('g', root, leaf('fast', false), leaf('slow', true), fail), {
        inputs: {},
        flowId: 'cc',
      })
      .catch((e: unknown) => e);
    await expect
      .poll(
        async () =>
          (await log.history('cc')).some((e) => e.task === 'fast' && e.state === 'REVERTED'),
        { timeout: 3000 },
      )
      .toBe(true);
    expect(order).toContain('start slow');
    expect(order).not.toContain('end slow');
    expect(order).not.toContain('revert root');
    slowGate.resolve();
    const error = await running;
    expect(order.at(-1)).toBe('revert root');
    expect(revertsOf(error)).toContain('root:REVERTED');
  });

  it('stops at the first failed revert even when an unrelated task could still be reverted (onRevertFailure: stop)', async () => {
    const events: string[] = [];
    const error = await new Engine()
      .run(fork(events, 'b'), { inputs: {} })
      .catch((e: unknown) => e);
    expect((error as FlowFailed).code).toBe('tasks.revert_failed');
    expect(events).toEqual(['revert b']);
    expect(revertsOf(error)).toEqual(['b:REVERT_FAILURE', 'a:PENDING']);
  });

  it('a log that fails while reverting stops the rollback with its error; the flow stays resumable and is rolled back in full later', async () => {
    const inner = memoryLog();
    let down = true;
    const log = outage(
      inner,
      (entries) => down && entries.some((e) => e.task === 'b' && e.state === 'REVERTING'),
    );
    const events: string[] = [];
    const flow = fork(events);
    const error = await new Engine({ log })
      .run(flow, { inputs: {}, flowId: 'down' })
      .catch((e: unknown) => e);
    expect(error).not.toBeInstanceOf(FlowFailed);
    expect((error as Error).message).toBe('log unreachable');
    // Nothing was reverted: not 'b' (its REVERTING was not written), nor 'a' after it.
    expect(events).toEqual([]);
    expect((await inner.load('down'))!.record.state).toBe('REVERTING');

    down = false;
    const resumed = await new Engine({ log }).resume('down', flow).catch((e: unknown) => e);
    expect((resumed as FlowFailed).code).toBe('tasks.flow_failed');
    expect(events).toEqual(['revert b', 'revert a']);
  });

  it('a resume stopped at a failed revert still reports the reverts that failed before it', async () => {
    const log = memoryLog();
    const events: string[] = [];
    const twoBroken = (name: string): Task =>
      task({
        name,
        provides: name,
        execute: () => name,
        revert: () => {
          events.push(`revert ${name}`);
          throw new Error(`${name} revert broke`);
        },
      }) as Task;
    const flow = graphFlow(
      'fork',
      twoBroken('a'),
      twoBroken('b'),
      task({
        name: 'c',
        requires: ['a', 'b'],
        execute: () => {
          throw new Error('c broke');
        },
      }),
    );
    const first = await new Engine({ log, onRevertFailure: 'tolerant' })
      .run(flow, { inputs: {}, flowId: 'rr' })
      .catch((e: unknown) => e);
    expect(revertsOf(first)).toEqual(['b:REVERT_FAILURE', 'a:REVERT_FAILURE']);
    // Resumed in 'stop' mode: b's revert fails again and stops the rollback before a's.
    const second = await new Engine({ log }).resume('rr', flow).catch((e: unknown) => e);
    expect((second as FlowFailed).code).toBe('tasks.revert_failed');
    expect(events).toEqual(['revert b', 'revert a', 'revert b']);
    const reverts = (second as FlowFailed).reverts;
    expect(reverts.map((r) => `${r.task}:${r.state}`).sort()).toEqual([
      'a:REVERT_FAILURE',
      'b:REVERT_FAILURE',
    ]);
    expect(reverts.find((r) => r.task === 'a')?.failure).toMatchObject({
      task: 'a',
      message: 'a revert broke',
    });
  });
});
