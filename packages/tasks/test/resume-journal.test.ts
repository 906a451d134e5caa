import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import {
  Engine,
  FlowFailed,
  linearFlow,
  memoryLog,
  task,
  times,
  type Task,
  type TaskLog,
  type TaskStateEvent,
} from '../src/index.js';
import { testLocks } from './helpers.js';

/**
 * Runs `flow` as `flowId` under a lock, and makes its owner vanish (its lease lost, nothing
 * written by it afterwards) right after the transition `when` matches was logged.
 */
async function ownerVanishesAfter(
  log: TaskLog,
  locks: ReturnType<typeof testLocks>,
  flow: Task | ReturnType<typeof linearFlow>,
  flowId: string,
  when: (e: TaskStateEvent) => boolean,
): Promise<void> {
  const owner = new Engine({ log, locks: locks.provider });
  owner.on('task:state', (e) => {
    if (when(e)) locks.lose(`rigging-tasks:${flowId}`);
  });
  const error = await owner.run(flow, { inputs: {}, flowId }).catch((e: unknown) => e);
  expect(RiggingError.hasCode(error, 'tasks.ownership_lost')).toBe(true);
}

/** The log's sequence numbers go up by one, with no gap and no repeat, across owners. */
async function expectContiguousSeqs(log: TaskLog, flowId: string): Promise<void> {
  const seqs = (await log.history(flowId)).map((e) => e.seq);
  expect(seqs).toEqual(seqs.map((_, i) => i + 1));
}

function counting() {
  const events: string[] = [];
  const make = (
    name: string,
    opts: { fail?: boolean | (() => boolean); revert?: () => Promise<void> | void } = {},
  ): Task =>
    task({
      name,
      provides: name,
      execute: () => {
        const fail = typeof opts.fail === 'function' ? opts.fail() : opts.fail;
        events.push(`${fail ? 'fail' : 'exec'} ${name}`);
        if (fail) throw new Error(`${name} broke`);
        return `${name}!`;
      },
      revert: async (_ctx, { result, failure }) => {
        events.push(`revert ${name} ${String(result)} for ${String(failure?.task)}`);
        await opts.revert?.();
      },
    }) as Task;
  return { events, make };
}

describe('resume: the log, folded back, decides what runs again', () => {
  it('an owner gone right after a task failed (before the flow turned to reverting): the next owner reverts, runs nothing, and reports that failure', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    const flow = linearFlow('f', make('a'), make('b'), make('c', { fail: true }), make('d'));
    await ownerVanishesAfter(
      log,
      locks,
      flow,
      'ff',
      (e) => e.task === 'c' && e.state === 'FAILURE',
    );
    expect((await log.load('ff'))!.record.state).toBe('RUNNING');
    events.length = 0;

    const error = await new Engine({ log, locks: locks.provider })
      .resume('ff', flow)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlowFailed);
    expect((error as FlowFailed).code).toBe('tasks.flow_failed');
    expect((error as FlowFailed).failures).toHaveLength(1);
    expect((error as FlowFailed).failures[0]).toMatchObject({ task: 'c', message: 'c broke' });
    expect(events).toEqual(['revert b b! for c', 'revert a a! for c']);
    await expectContiguousSeqs(log, 'ff');
  });

  it('an owner gone in the middle of a revert: the revert in flight runs again, the finished ones do not, each with the original failure', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    let dead = true;
    const flow = linearFlow(
      'f',
      make('a'),
      make('b', {
        // The first owner dies inside this revert: it never returns.
        revert: () => (dead ? new Promise<void>(() => {}) : undefined),
      }),
      make('c'),
      make('d', { fail: true }),
    );
    const owner = new Engine({ log, locks: locks.provider });
    void owner.run(flow, { inputs: {}, flowId: 'mr' }).catch(() => undefined);
    await expect.poll(() => events.includes('revert b b! for d')).toBe(true);
    locks.lose('rigging-tasks:mr');
    dead = false;
    const states = (await log.history('mr')).map((e) => `${e.task ?? 'flow'}:${e.state}`);
    expect(states.slice(-4)).toEqual([
      'flow:REVERTING',
      'c:REVERTING',
      'c:REVERTED',
      'b:REVERTING',
    ]);

    const error = await new Engine({ log, locks: locks.provider })
      .resume('mr', flow)
      .catch((e: unknown) => e);
    expect((error as FlowFailed).code).toBe('tasks.flow_failed');
    expect((error as FlowFailed).failures[0]).toMatchObject({ task: 'd', message: 'd broke' });
    expect(events).toEqual([
      'exec a',
      'exec b',
      'exec c',
      'fail d',
      'revert c c! for d',
      'revert b b! for d',
      'revert b b! for d',
      'revert a a! for d',
    ]);
    expect((error as FlowFailed).reverts.map((r) => `${r.task}:${r.state}`)).toEqual([
      'c:REVERTED',
      'b:REVERTED',
      'a:REVERTED',
    ]);
    await expectContiguousSeqs(log, 'mr');
  });

  it("a sub-flow's retries are counted across owners: an owner gone right after logging a retry leaves the rest of the budget, not a new one", async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    const flow = linearFlow(
      'outer',
      make('a'),
      linearFlow({ name: 'inner', retry: times(2) }, make('b'), make('c', { fail: true })),
    );
    await ownerVanishesAfter(
      log,
      locks,
      flow,
      'sub',
      (e) => e.task === 'c' && e.state === 'RETRYING',
    );
    expect(events).toEqual(['exec a', 'exec b', 'fail c']);

    const error = await new Engine({ log, locks: locks.provider })
      .resume('sub', flow)
      .catch((e: unknown) => e);
    expect((error as FlowFailed).code).toBe('tasks.flow_failed');
    // Three attempts of 'inner' in all (times(2)): one before the owner vanished, two after.
    expect(events.filter((e) => e === 'fail c')).toHaveLength(3);
    expect(events.filter((e) => e === 'exec a')).toHaveLength(1);
    expect(events.at(-1)).toBe('revert a a! for c');
    const subflow = (await log.history('sub')).filter((e) => e.subflow);
    expect(subflow.map((e) => `${e.task} ${e.state} ${e.attempt}`)).toEqual([
      'inner RETRYING 1',
      'inner RUNNING 2',
      'inner RETRYING 2',
      'inner RUNNING 3',
    ]);
    await expectContiguousSeqs(log, 'sub');
  });

  it('an owner gone after a sub-flow attempt started: the next owner goes on with that attempt', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    let failures = 1;
    const flow = linearFlow(
      'outer',
      make('a'),
      linearFlow(
        { name: 'inner', retry: times(1) },
        make('b'),
        make('c', { fail: () => failures-- > 0 }),
      ),
    );
    // Vanishes once attempt 2 of 'inner' has run its first task.
    let retried = false;
    await ownerVanishesAfter(log, locks, flow, 'sub2', (e) => {
      if (e.task === 'c' && e.state === 'RETRYING') retried = true;
      return retried && e.task === 'b' && e.state === 'RUNNING';
    });
    const out = await new Engine({ log, locks: locks.provider }).resume('sub2', flow);
    expect(out).toEqual({ a: 'a!', b: 'b!', c: 'c!' });
    expect(events.filter((e) => e === 'fail c')).toHaveLength(1);
    const subflow = (await log.history('sub2')).filter((e) => e.subflow);
    expect(subflow.map((e) => `${e.task} ${e.state} ${e.attempt}`)).toEqual([
      'inner RETRYING 1',
      'inner RUNNING 2',
    ]);
    await expectContiguousSeqs(log, 'sub2');
  });

  it('entries of a task the new definition dropped (accepted by migrate) are ignored', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    const old = linearFlow('f', make('gone'), make('b'), make('c'));
    await ownerVanishesAfter(
      log,
      locks,
      old,
      'mig',
      (e) => e.task === 'b' && e.state === 'RUNNING',
    );
    events.length = 0;
    const current = linearFlow('f', make('b'), make('c'));
    const out = await new Engine({ log, locks: locks.provider }).resume('mig', current, {
      migrate: () => ({ accept: true }),
    });
    expect(out).toEqual({ b: 'b!', c: 'c!' });
    expect(events).toEqual(['exec b', 'exec c']);
  });

  it('a resumed rollback reports only the reverts: a task retried before it failed is not one', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = counting();
    const flaky = task({
      name: 'b',
      retry: times(1),
      execute: () => {
        events.push('fail b');
        throw new Error('b broke');
      },
    }) as Task;
    const flow = linearFlow('f', make('a'), flaky);
    await ownerVanishesAfter(
      log,
      locks,
      flow,
      'rt',
      (e) => e.task === 'b' && e.state === 'FAILURE',
    );
    expect(events).toEqual(['exec a', 'fail b', 'fail b']);
    const error = await new Engine({ log, locks: locks.provider })
      .resume('rt', flow)
      .catch((e: unknown) => e);
    expect((error as FlowFailed).code).toBe('tasks.flow_failed');
    expect((error as FlowFailed).reverts.map((r) => `${r.task}:${r.state}`)).toEqual([
      'a:REVERTED',
    ]);
  });
});
