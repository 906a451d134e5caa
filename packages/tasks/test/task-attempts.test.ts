// The attempt loop (`src/run-attempts.ts`): what a task's retries, its controller's decisions
// and the enclosing flows' controllers guarantee, as the log and the task see them.
import { describe, expect, it } from 'vitest';
import { ManualClock, RiggingError, type Logger } from '@rigging/core';
import {
  Engine,
  FlowFailed,
  alternatives,
  linearFlow,
  memoryLog,
  revertAll,
  task,
  times,
  graphFlow,
  unorderedFlow,
  type LogEntry,
  type RetryController,
  type Task,
} from '../src/index.js';
import { recorder, testLocks } from './helpers.js';

const brief = (e: LogEntry) =>
  `${e.task ?? 'flow'}${e.subflow ? ' (flow)' : ''} ${e.state}${e.attempt !== undefined ? ` ${e.attempt}` : ''}`;

/** The brief entries of `task` in `flowId`'s history. */
async function historyOf(engine: Engine, flowId: string, name?: string): Promise<string[]> {
  const entries = await engine.history(flowId);
  return entries.filter((e) => name === undefined || e.task === name).map(brief);
}

/** A task that fails its first `failures` attempts (throwing `attempt N broke`), then returns its attempt. */
function flaky(name: string, failures: number, retry: RetryController, calls: number[] = []): Task {
  return task({
    name,
    provides: name,
    retry,
    execute: (ctx) => {
      calls.push(ctx.attempt);
      if (ctx.attempt <= failures) throw new Error(`attempt ${ctx.attempt} broke`);
      return ctx.attempt;
    },
  }) as Task;
}

describe('a task’s attempts', () => {
  it('waits the backoff on the engine’s clock between attempts; each failure is logged RETRYING with its error before the next RUNNING', async () => {
    const clock = new ManualClock();
    const engine = new Engine({ clock });
    const calls: number[] = [];
    const running = engine.run(
      flaky(
        't',
        2,
        times(3, (retry) => retry * 100),
        calls,
      ),
      {
        inputs: {},
        flowId: 'backoff',
      },
    );
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(calls).toEqual([1]);
    await clock.advance(99);
    expect(calls).toEqual([1]); // not before its delay
    await clock.advance(1);
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(calls).toEqual([1, 2]);
    await clock.advance(199);
    expect(calls).toEqual([1, 2]);
    await clock.advance(1);
    expect(await running).toEqual({ t: 3 });
    expect(calls).toEqual([1, 2, 3]);
    const entries = (await engine.history('backoff')).filter((e) => e.task === 't');
    expect(entries.map(brief)).toEqual([
      't RUNNING 1',
      't RETRYING 1',
      't RUNNING 2',
      't RETRYING 2',
      't RUNNING 3',
      't SUCCESS 3',
    ]);
    expect(entries.filter((e) => e.state === 'RETRYING').map((e) => e.failure)).toMatchObject([
      { task: 't', message: 'attempt 1 broke' },
      { task: 't', message: 'attempt 2 broke' },
    ]);
    // The next attempt starts once its wait is over (the clock's time when it was logged).
    expect(entries.map((e) => e.at)).toEqual([0, 0, 100, 100, 300, 300]);
  });

  it('a retry without a delay does not wait (no sleep on the clock)', async () => {
    const clock = new ManualClock();
    const engine = new Engine({ clock });
    expect(await engine.run(flaky('t', 2, times(2)), { inputs: {} })).toEqual({ t: 3 });
    expect(clock.pendingSleeps).toBe(0);
  });

  it('a cancellation during the backoff ends the task CANCELLED with the reason; no further attempt; what completed is reverted', async () => {
    const clock = new ManualClock();
    const engine = new Engine({ clock });
    const { events, make } = recorder();
    const calls: number[] = [];
    const ac = new AbortController();
    const running = engine
      .run(linearFlow('f', make('a'), flaky('t', 5, times(5, 1000), calls)), {
        inputs: {},
        flowId: 'cancel-wait',
        signal: ac.signal,
      })
      .catch((e: unknown) => e);
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    ac.abort(new Error('user gave up'));
    const error = (await running) as FlowFailed;
    expect(error).toBeInstanceOf(FlowFailed);
    expect(error.code).toBe('tasks.cancelled');
    expect(calls).toEqual([1]);
    expect(events).toEqual(['exec a', 'revert a']);
    const entries = (await engine.history('cancel-wait')).filter((e) => e.task === 't');
    expect(entries.map(brief)).toEqual(['t RUNNING 1', 't RETRYING 1', 't CANCELLED 1']);
    expect(entries[2]!.failure).toMatchObject({ task: 't', message: 'user gave up' });
    expect(clock.pendingSleeps).toBe(0);
  });

  it('an attempt that fails after the run was cancelled is CANCELLED and not retried, whatever its controller says', async () => {
    const ac = new AbortController();
    const calls: number[] = [];
    const t = task({
      name: 't',
      retry: times(5),
      execute: async (ctx) => {
        calls.push(ctx.attempt);
        ac.abort(new Error('stop now'));
        throw new Error('broke while cancelled');
      },
    });
    const engine = new Engine();
    const error = await engine
      .run(t, { inputs: {}, flowId: 'cancel-run', signal: ac.signal })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.cancelled')).toBe(true);
    expect(calls).toEqual([1]);
    const entries = (await engine.history('cancel-run')).filter((e) => e.task === 't');
    expect(entries.map(brief)).toEqual(['t RUNNING 1', 't CANCELLED 1']);
    expect(entries[1]!.failure).toMatchObject({ message: 'broke while cancelled' });
  });

  it('a result the log cannot store fails the task at once, retries notwithstanding, and the flow reverts', async () => {
    for (const execute of [() => () => 1, async () => 10n]) {
      const { events, make } = recorder();
      let calls = 0;
      const bad = task({
        name: 'bad',
        retry: times(3),
        execute: () => {
          calls++;
          return execute() as unknown as number;
        },
      });
      const engine = new Engine();
      const error = (await engine
        .run(linearFlow('f', make('a'), bad), { inputs: {}, flowId: 'bad' })
        .catch((e: unknown) => e)) as FlowFailed;
      expect(error.code).toBe('tasks.flow_failed');
      expect(calls).toBe(1);
      expect(events).toEqual(['exec a', 'revert a']);
      expect(await historyOf(engine, 'bad', 'bad')).toEqual(['bad RUNNING 1', 'bad FAILURE 1']);
      expect(error.failures[0]).toMatchObject({
        task: 'bad',
        code: 'tasks.result_not_serializable',
      });
      // What is wrong is named, in the message and in the details.
      const { message, details } = error.failures[0]!;
      expect(details).toEqual({ task: 'bad', reason: expect.stringMatching(/^result /) });
      const reason = (details as { reason: string }).reason;
      expect(message).toBe(`task 'bad' returned a value that is not JSON: ${reason}`);
    }
  });

  it('a task providing several symbols must return an object: anything else fails it, retries notwithstanding', async () => {
    for (const result of [7, null, undefined, 'x']) {
      for (const wrap of [(v: unknown) => v, (v: unknown) => Promise.resolve(v)]) {
        let calls = 0;
        const two = task({
          name: 'two',
          provides: ['x', 'y'],
          retry: times(2),
          execute: () => {
            calls++;
            return wrap(result) as never;
          },
        });
        const error = (await new Engine()
          .run(two, { inputs: {} })
          .catch((e: unknown) => e)) as FlowFailed;
        expect(error).toBeInstanceOf(FlowFailed);
        expect(calls).toBe(1);
        expect(error.failures[0]!.message).toBe(
          `task 'two' provides ["x","y"] but returned ${JSON.stringify(result ?? null)}, not an object`,
        );
      }
    }
    const ok = task({ name: 'two', provides: ['x', 'y'], execute: () => ({ x: 1, y: 2 }) });
    expect(await new Engine().run(ok, { inputs: {} })).toEqual({ x: 1, y: 2 });
  });

  it('undefined is stored as null, whether returned at once or resolved later', async () => {
    for (const execute of [() => undefined, async () => undefined]) {
      const engine = new Engine();
      const t = task({ name: 't', provides: 't', execute: execute as unknown as () => null });
      expect(await engine.run(t, { inputs: {}, flowId: 'u' })).toEqual({ t: null });
      const success = (await engine.history('u')).find((e) => e.state === 'SUCCESS');
      expect(success).toHaveProperty('result', null);
    }
  });

  it('each attempt gets its own parameter set in ctx.params and its inputs (alternatives), the first one included', async () => {
    const seen: unknown[] = [];
    const pick = task({
      name: 'pick',
      requires: ['zone'],
      provides: 'picked',
      retry: alternatives([{ zone: 'z1' }, { zone: 'z2' }, { zone: 'z3' }]),
      execute: (ctx, { zone }: { zone: string }) => {
        seen.push([ctx.attempt, ctx.params, zone]);
        if (zone !== 'z3') throw new Error(`${zone} full`);
        return zone;
      },
    });
    expect(await new Engine().run(pick, { inputs: { zone: 'default' } })).toEqual({ picked: 'z3' });
    expect(seen).toEqual([
      [1, { zone: 'z1' }, 'z1'],
      [2, { zone: 'z2' }, 'z2'],
      [3, { zone: 'z3' }, 'z3'],
    ]);
  });

  it("a controller's decision may carry the next attempt's params; they win over paramsFor", async () => {
    const seen: unknown[] = [];
    const controller: RetryController = {
      kind: 'custom',
      paramsFor: (attempt) => ({ size: `from paramsFor ${attempt}` }),
      onFailure: ({ attempt }) =>
        attempt === 1
          ? { action: 'retry', params: { size: 'from the decision' } }
          : { action: 'revert' },
    };
    const t = task({
      name: 't',
      requires: ['size'],
      retry: controller,
      execute: (ctx, { size }: { size: string }) => {
        seen.push([ctx.attempt, size]);
        if (ctx.attempt === 1) throw new Error('too big');
        return size;
      },
    });
    await new Engine().run(t, { inputs: { size: 'given' } });
    expect(seen).toEqual([
      [1, 'from paramsFor 1'],
      [2, 'from the decision'],
    ]);
  });

  it('ctx.logger is the engine’s logger bound to the flow and the task', async () => {
    const lines: unknown[] = [];
    const logger = (bindings: Record<string, unknown>): Logger =>
      ({
        trace: () => {},
        debug: () => {},
        info: (obj: unknown, msg?: string) => lines.push([bindings, obj, msg]),
        warn: () => {},
        error: () => {},
        fatal: () => {},
        child: (more: Record<string, unknown>) => logger({ ...bindings, ...more }),
      }) as unknown as Logger;
    const t = task({
      name: 'talk',
      execute: (ctx) => {
        ctx.logger.info({ n: 1 }, 'hello');
        return 1;
      },
    });
    await new Engine({ logger: logger({ app: 'x' }) }).run(t, { inputs: {}, flowId: 'talking' });
    expect(lines).toEqual([[{ app: 'x', flowId: 'talking', task: 'talk' }, { n: 1 }, 'hello']]);
  });
});

describe('a stop while an attempt fails', () => {
  it('a suspend during a failing attempt starts no further attempt and reverts nothing; resume goes on with the next attempt', async () => {
    const { events, make } = recorder();
    const engine = new Engine();
    const calls: number[] = [];
    let suspended: Promise<boolean> | undefined;
    const t = task({
      name: 't',
      provides: 't',
      retry: times(3),
      execute: async (ctx) => {
        calls.push(ctx.attempt);
        if (ctx.attempt === 1) {
          suspended = engine.suspend('suspend-retry');
          throw new Error('first attempt broke');
        }
        return ctx.attempt;
      },
    });
    const flow = linearFlow('f', make('a'), t, make('b'));
    const error = await engine
      .run(flow, { inputs: {}, flowId: 'suspend-retry' })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.suspended')).toBe(true);
    expect(await suspended).toBe(true);
    expect(calls).toEqual([1]);
    expect(events).toEqual(['exec a']);
    await engine.resume('suspend-retry', flow);
    expect(calls).toEqual([1, 2]);
    expect(events).toEqual(['exec a', 'exec b']);
    expect(await historyOf(engine, 'suspend-retry', 't')).toEqual([
      't RUNNING 1',
      't RETRYING 1',
      't RUNNING 2',
      't SUCCESS 2',
    ]);
  });

  it('a lease lost during a failing attempt: the next owner goes on with the next attempt, nothing reverted', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = recorder();
    const calls: number[] = [];
    const t = task({
      name: 't',
      provides: 't',
      retry: times(3),
      execute: async (ctx) => {
        calls.push(ctx.attempt);
        if (ctx.attempt === 1) {
          locks.lose('rigging-tasks:lost-retry');
          throw new Error('first attempt broke');
        }
        return ctx.attempt;
      },
    });
    const flow = linearFlow('f', make('a'), t, make('b'));
    const error = await new Engine({ log, locks: locks.provider })
      .run(flow, { inputs: {}, flowId: 'lost-retry' })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.ownership_lost')).toBe(true);
    expect(calls).toEqual([1]);
    await new Engine({ log, locks: locks.provider }).resume('lost-retry', flow);
    expect(calls).toEqual([1, 2]);
    expect(events).toEqual(['exec a', 'exec b']);
  });
});

describe('flow retries asked by a failing task', () => {
  /**
   * The delays below are in ticks of this many milliseconds: the tests order side-by-side tasks by
   * their delays, and a loaded machine can start one task several milliseconds after another.
   */
  const TICK = 5;
  /** A task that fails while `fails()` says so (after `ms` ticks), recording its runs and reverts in `events`. */
  const step = (
    events: string[],
    name: string,
    fails: () => boolean = () => false,
    requires: string[] = [],
    ms = 1,
  ) =>
    task({
      name,
      provides: name,
      requires,
      execute: async () => {
        await new Promise((r) => setTimeout(r, ms * TICK));
        if (fails()) {
          events.push(`fail ${name}`);
          throw new Error(`${name} broke`);
        }
        events.push(`exec ${name}`);
        return name;
      },
      revert: () => {
        events.push(`revert ${name}`);
      },
    }) as Task;

  it('flows between the task and the retrying one are passed over, whether without a controller or giving up', async () => {
    for (const middle of [{ name: 'mid' }, { name: 'mid', retry: times(0) }]) {
      const events: string[] = [];
      let failures = 1;
      const flow = linearFlow(
        'root',
        step(events, 'a'),
        linearFlow(
          { name: 'outer', retry: times(1) },
          step(events, 'b'),
          linearFlow(
            middle,
            step(events, 'c'),
            step(events, 'd', () => failures-- > 0),
          ),
        ),
      );
      const engine = new Engine();
      await engine.run(flow, { inputs: {}, flowId: 'levels' });
      expect(events).toEqual([
        'exec a',
        'exec b',
        'exec c',
        'fail d',
        'revert c',
        'revert b',
        'exec b',
        'exec c',
        'exec d',
      ]);
      const subflows = (await engine.history('levels')).filter((e) => e.subflow).map(brief);
      expect(subflows).toEqual(['outer (flow) RETRYING 1', 'outer (flow) RUNNING 2']);
    }
  });

  it('tasks of one attempt of a sub-flow failing side by side: the sub-flow runs again (both failures are one failed attempt)', async () => {
    const events: string[] = [];
    let round = 1;
    const flow = linearFlow(
      'root',
      step(events, 'a'),
      unorderedFlow(
        { name: 'inner', retry: times(1) },
        // y, the sub-flow's first task, fails last.
        step(events, 'y', () => round === 1, [], 15),
        step(events, 'x', () => round === 1),
        step(events, 'z', () => false, [], 5),
      ),
      task({ name: 'end', execute: () => (events.push('end'), 1) }),
    );
    const engine = new Engine({ concurrency: 3 });
    engine.on('task:state', (e) => {
      if (e.task === 'y' && e.state === 'RETRYING') round = 2;
    });
    await engine.run(flow, { inputs: {}, flowId: 'side-by-side' });
    expect(events).toEqual([
      'exec a',
      'fail x',
      'exec z',
      'fail y',
      'revert z',
      'exec x',
      'exec z',
      'exec y',
      'end',
    ]);
    const entries = (await engine.history('side-by-side')).filter(
      (e) => e.subflow || e.task === 'y',
    );
    expect(entries.map(brief)).toEqual([
      'y RUNNING 1',
      'inner (flow) RETRYING 1',
      'y RETRYING 1',
      'y PENDING 0',
      'inner (flow) RUNNING 2',
      'y RUNNING 1',
      'y SUCCESS 1',
    ]);
  });

  it('a task outside the sub-flow failing while the sub-flow waits to run again: the whole flow reverts, for both failures', async () => {
    for (const outsideFirst of [false, true]) {
      const events: string[] = [];
      const inner = linearFlow(
        { name: 'inner', retry: times(3) },
        step(events, 'x', () => true),
      );
      const outside = step(events, 'outside', () => true, [], 15);
      const flow = unorderedFlow(
        'root',
        ...(outsideFirst ? [outside, inner] : [inner, outside]),
        step(events, 'fine', () => false, [], 5),
      );
      const error = (await new Engine({ concurrency: 3 })
        .run(flow, { inputs: {} })
        .catch((e: unknown) => e)) as FlowFailed;
      expect(error).toBeInstanceOf(FlowFailed);
      expect(events).toEqual(['fail x', 'exec fine', 'fail outside', 'revert fine']);
      expect(error.failures.map((f) => f.task)).toEqual(['outside', 'x']);
    }
  });

  it('a task of the sub-flow failing with revertAll while the sub-flow waits to run again: the whole flow reverts', async () => {
    const events: string[] = [];
    const hard = task({
      name: 'hard',
      retry: revertAll,
      execute: async () => {
        await new Promise((r) => setTimeout(r, 15 * TICK));
        events.push('fail hard');
        throw new Error('hard broke');
      },
    }) as Task;
    const flow = linearFlow(
      'root',
      step(events, 'a'),
      unorderedFlow(
        { name: 'inner', retry: times(3) },
        step(events, 'x', () => true),
        hard,
      ),
    );
    const engine = new Engine({ concurrency: 2 });
    const error = (await engine
      .run(flow, { inputs: {}, flowId: 'hard' })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(error).toBeInstanceOf(FlowFailed);
    expect(events).toEqual(['exec a', 'fail x', 'fail hard', 'revert a']);
    expect((await engine.history('hard')).filter((e) => e.task === 'hard').map(brief)).toEqual([
      'hard RUNNING 1',
      'hard FAILURE 1',
    ]);
  });

  it('the innermost flow that retries is the one run again', async () => {
    const events: string[] = [];
    let failures = 1;
    const flow = linearFlow(
      { name: 'outer', retry: times(1) },
      step(events, 'a'),
      linearFlow(
        { name: 'inner', retry: times(1) },
        step(events, 'b'),
        step(events, 'c', () => failures-- > 0),
      ),
    );
    await new Engine().run(flow, { inputs: {} });
    expect(events).toEqual(['exec a', 'exec b', 'fail c', 'revert b', 'exec b', 'exec c']);
  });

  it('a flow whose results a task outside it already used is not run again: the whole flow reverts', async () => {
    const events: string[] = [];
    let slowFailure = true;
    const late = task({
      name: 'late',
      execute: async () => {
        await new Promise((r) => setTimeout(r, 30 * TICK));
        if (slowFailure) {
          events.push('fail late');
          throw new Error('late broke');
        }
        return 1;
      },
    }) as Task;
    const flow = graphFlow(
      'root',
      linearFlow({ name: 'inner', retry: times(3) }, step(events, 'p'), late),
      step(events, 'reader', () => false, ['p']),
    );
    const engine = new Engine({ concurrency: 2 });
    const error = await engine.run(flow, { inputs: {}, flowId: 'used' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlowFailed);
    expect(events).toEqual(['exec p', 'exec reader', 'fail late', 'revert reader', 'revert p']);
    expect((await engine.history('used')).filter((e) => e.subflow)).toEqual([]);
    slowFailure = false;
  });

  it('a task defined before the sub-flow that already used its results counts as well', async () => {
    const events: string[] = [];
    const late = task({
      name: 'late',
      execute: async () => {
        await new Promise((r) => setTimeout(r, 30 * TICK));
        events.push('fail late');
        throw new Error('late broke');
      },
    }) as Task;
    const flow = graphFlow(
      'root',
      step(events, 'reader', () => false, ['p']),
      linearFlow({ name: 'inner', retry: times(3) }, step(events, 'p'), late),
    );
    const error = await new Engine({ concurrency: 2 })
      .run(flow, { inputs: {} })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlowFailed);
    expect(events).toEqual(['exec p', 'exec reader', 'fail late', 'revert reader', 'revert p']);
  });

  it('a graph sub-flow whose first task depends on another of its tasks is still run again', async () => {
    const events: string[] = [];
    let failures = 1;
    const inner = graphFlow(
      { name: 'inner', retry: times(1) },
      step(events, 'x', () => false, ['y']),
      step(events, 'y'),
      step(events, 'z', () => failures-- > 0, ['x']),
    );
    await new Engine().run(linearFlow('root', inner), { inputs: {} });
    expect(events).toEqual([
      'exec y',
      'exec x',
      'fail z',
      'revert x',
      'revert y',
      'exec y',
      'exec x',
      'exec z',
    ]);
  });

  it("a flow retry waits its controller's delay on the engine's clock", async () => {
    const clock = new ManualClock();
    const events: string[] = [];
    let failures = 1;
    const flow = linearFlow(
      { name: 'inner', retry: times(1, 500) },
      step(events, 'a'),
      step(events, 'b', () => failures-- > 0),
    );
    const engine = new Engine({ clock });
    const running = engine.run(flow, { inputs: {}, flowId: 'delayed' });
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(events).toEqual(['exec a', 'fail b', 'revert a']);
    await clock.advance(499);
    expect(events).toEqual(['exec a', 'fail b', 'revert a']);
    await clock.advance(1);
    await running;
    expect(events).toEqual(['exec a', 'fail b', 'revert a', 'exec a', 'exec b']);
  });
});
