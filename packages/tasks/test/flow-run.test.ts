// A flow's run (`src/flow-run.ts`): its phases, how a resume picks the phase up from the log, and
// how a stop (cancellation, suspension, a lost lease, a failing log) ends it.
import { describe, expect, it } from 'vitest';
import { deferred, RiggingError, type Lease } from '@rigging/core';
import {
  Engine,
  FlowFailed,
  linearFlow,
  memoryLog,
  task,
  times,
  type FlowStateEvent,
  type Task,
  type TaskLog,
} from '../src/index.js';
import { recorder, testLocks } from './helpers.js';

/** A caller-held lease (as a queue's claim is) whose loss the test controls. */
function callerLease(token = 1n) {
  const lost = new AbortController();
  const lease: Lease = {
    key: 'claim',
    mode: 'exclusive',
    token,
    lost: lost.signal,
    release: async () => {},
    [Symbol.asyncDispose]: async () => {},
  };
  return { lease, lose: (reason: unknown) => lost.abort(reason) };
}

/** The flow states `engine` emits for `flowId`, in order. */
function flowStates(engine: Engine) {
  const seen: FlowStateEvent[] = [];
  engine.on('flow:state', (e) => seen.push(e));
  return seen;
}

describe('resuming a finished flow', () => {
  it('a flow that succeeded gives its outputs again; one reverted or cancelled throws its failure again, with the reverts; nothing is run or written', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    const { make } = recorder();
    const ok = linearFlow('ok', make('a', { provides: 'x' }));
    await engine.run(ok, { inputs: {}, flowId: 'ok' });
    const written = async () => (await log.history('ok')).length;
    const before = await written();
    expect(await engine.resume('ok', ok)).toEqual({ x: 'result of a' });
    expect(await written()).toBe(before); // nothing run or written again

    const failing = linearFlow('bad', make('a'), make('b', { fail: true }));
    const first = (await engine
      .run(failing, { inputs: {}, flowId: 'bad' })
      .catch((e: unknown) => e)) as FlowFailed;
    const failedEntries = (await log.history('bad')).length;
    const again = (await engine.resume('bad', failing).catch((e: unknown) => e)) as FlowFailed;
    expect((await log.history('bad')).length).toBe(failedEntries);
    expect(again).toBeInstanceOf(FlowFailed);
    expect(again.code).toBe('tasks.flow_failed');
    expect(again.failures).toEqual(first.failures);
    expect(again.reverts).toEqual([{ task: 'a', state: 'REVERTED' }]);

    const ac = new AbortController();
    const slow = task({
      name: 'slow',
      execute: (ctx) =>
        new Promise((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
          ac.abort(new Error('user cancelled'));
        }),
    }) as Task;
    const cancellable = linearFlow('cancel', make('a'), slow);
    const cancelledFirst = (await engine
      .run(cancellable, { inputs: {}, flowId: 'cancelled', signal: ac.signal })
      .catch((e: unknown) => e)) as FlowFailed;
    const cancelledEntries = (await log.history('cancelled')).length;
    const cancelled = (await engine
      .resume('cancelled', cancellable)
      .catch((e: unknown) => e)) as FlowFailed;
    expect((await log.history('cancelled')).length).toBe(cancelledEntries);
    expect(cancelled.code).toBe('tasks.cancelled');
    expect(cancelled.failures).toEqual(cancelledFirst.failures);
    expect(cancelled.failures).toMatchObject([{ task: null, message: 'user cancelled' }]);
    expect(cancelled.reverts).toEqual([{ task: 'a', state: 'REVERTED' }]);
  });
});

describe('cancellation', () => {
  it('after the last task completed: what completed is reverted, the cause is the signal’s reason (task null)', async () => {
    const { events, make } = recorder();
    const ac = new AbortController();
    const last = task({
      name: 'last',
      execute: () => {
        ac.abort(new Error('too late'));
        return 1;
      },
      revert: () => {
        events.push('revert last');
      },
    }) as Task;
    const engine = new Engine();
    const states = flowStates(engine);
    const error = (await engine
      .run(linearFlow('f', make('a'), last), { inputs: {}, flowId: 'late', signal: ac.signal })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(error.code).toBe('tasks.cancelled');
    expect(error.failures).toMatchObject([{ task: null, message: 'too late' }]);
    expect(events).toEqual(['exec a', 'revert last', 'revert a']);
    expect(states.map((s) => s.state)).toEqual(['RUNNING', 'REVERTING', 'CANCELLED']);
    expect(states[1]!.failure).toMatchObject({ task: null, message: 'too late' });
  });

  it('a signal aborted with no reason still names the cancellation', async () => {
    const ac = new AbortController();
    const t = task({
      name: 't',
      execute: () => {
        ac.abort(undefined);
        return 1;
      },
    }) as Task;
    const error = (await new Engine()
      .run(t, { inputs: {}, signal: ac.signal })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(error.code).toBe('tasks.cancelled');
    expect(error.failures[0]!.task).toBeNull();
  });

  it('a signal that aborts while the engine prepares the run (taking the lease, loading the log) cancels before any task runs', async () => {
    const { events, make } = recorder();
    const log = memoryLog();
    const flow = linearFlow('f', make('a'), make('b'));
    const engine = new Engine({ log });
    await engine.suspend('none');
    // A first run suspended after 'a'.
    let suspended: Promise<boolean> | undefined;
    const off = engine.on('task:state', (e) => {
      if (e.task === 'a' && e.state === 'SUCCESS') suspended = engine.suspend('prep');
    });
    await engine.run(flow, { inputs: {}, flowId: 'prep' }).catch(() => undefined);
    await suspended;
    off();
    expect(events).toEqual(['exec a']);
    const ac = new AbortController();
    const loading: TaskLog = {
      ...log,
      load: async (flowId) => {
        const loaded = await log.load(flowId);
        ac.abort(new Error('gave up while loading'));
        return loaded;
      },
    };
    const error = (await new Engine({ log: loading })
      .resume('prep', flow, { signal: ac.signal })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(error.code).toBe('tasks.cancelled');
    expect(events).toEqual(['exec a', 'revert a']);
  });
});

describe('a lost lease', () => {
  it('a run under a lease already lost runs nothing and throws tasks.ownership_lost with the loss as its cause', async () => {
    const { events, make } = recorder();
    const { lease, lose } = callerLease();
    const reason = new Error('claim expired');
    lose(reason);
    const error = await new Engine()
      .run(linearFlow('f', make('a')), { inputs: {}, flowId: 'gone', lease })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.ownership_lost')).toBe(true);
    expect((error as Error).cause).toBe(reason);
    expect((error as RiggingError<string>).details).toEqual({ flowId: 'gone' });
    expect((error as Error).message).toBe(
      'flow gone stopped: this engine lost its lease; whoever acquires it next can resume the flow',
    );
    expect(events).toEqual([]);
  });

  it('lost while a task runs and the log refusing the owner’s writes since: ownership_lost, caused by the refusal', async () => {
    const log = memoryLog();
    const { lease, lose } = callerLease(5n);
    const refusal = new Error('fenced by a newer owner');
    let refusing = false;
    const fencing: TaskLog = {
      ...log,
      append: (flowId, entries, update) =>
        refusing ? Promise.reject(refusal) : log.append(flowId, entries, update),
    };
    const gate = deferred<void>();
    const { make } = recorder();
    const hold = task({
      name: 'hold',
      execute: async () => {
        await gate.promise;
        return 1;
      },
    }) as Task;
    const engine = new Engine({ log: fencing });
    const running = engine
      .run(linearFlow('f', make('a'), hold, make('b')), { inputs: {}, flowId: 'f1', lease })
      .catch((e: unknown) => e);
    await expect.poll(async () => (await log.history('f1')).length).toBe(4);
    refusing = true;
    lose(new Error('lease expired'));
    gate.resolve();
    const error = await running;
    expect(RiggingError.hasCode(error, 'tasks.ownership_lost')).toBe(true);
    expect((error as Error).cause).toBe(refusal);
  });
});

describe('a failing log', () => {
  it('a write failing in the forward phase ends the run with the log’s error; the flow stays resumable', async () => {
    const log = memoryLog();
    const broken = new Error('disk full');
    let failing = false;
    const flaky: TaskLog = {
      ...log,
      append: (flowId, entries, update) =>
        failing ? Promise.reject(broken) : log.append(flowId, entries, update),
    };
    const { events, make } = recorder();
    const flip = task({
      name: 'flip',
      execute: () => {
        failing = true;
        return 1;
      },
    }) as Task;
    const flow = linearFlow('f', make('a'), flip, make('b'));
    const error = await new Engine({ log: flaky })
      .run(flow, { inputs: {}, flowId: 'disk' })
      .catch((e: unknown) => e);
    expect(error).toBe(broken);
    expect(events).toEqual(['exec a']);
    expect((await log.load('disk'))!.record.state).toBe('RUNNING');
    failing = false;
    await new Engine({ log }).resume('disk', flow);
    expect(events).toEqual(['exec a', 'exec b']);
  });
});

describe('resuming an unfinished flow', () => {
  it('a flow cancelled and stopped while reverting goes on reverting on resume, and ends CANCELLED', async () => {
    const log = memoryLog();
    const events: string[] = [];
    const ac = new AbortController();
    const engine = new Engine({ log });
    let suspended: Promise<boolean> | undefined;
    const step = (name: string) =>
      task({
        name,
        provides: name,
        execute: () => {
          events.push(`exec ${name}`);
          if (name === 'c') ac.abort(new Error('stop it'));
          return name;
        },
        revert: () => {
          events.push(`revert ${name}`);
          if (name === 'c') suspended = engine.suspend('mid-revert');
        },
      }) as Task;
    const flow = linearFlow('f', step('a'), step('b'), step('c'));
    const first = await engine
      .run(flow, { inputs: {}, flowId: 'mid-revert', signal: ac.signal })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(first, 'tasks.suspended')).toBe(true);
    await suspended;
    expect(events).toEqual(['exec a', 'exec b', 'exec c', 'revert c']);
    const error = (await new Engine({ log })
      .resume('mid-revert', flow)
      .catch((e: unknown) => e)) as FlowFailed;
    expect(error.code).toBe('tasks.cancelled');
    expect(error.failures).toMatchObject([{ task: null, message: 'stop it' }]);
    expect(events).toEqual(['exec a', 'exec b', 'exec c', 'revert c', 'revert b', 'revert a']);
    expect((await log.load('mid-revert'))!.record.state).toBe('CANCELLED');
  });

  it('a suspended flow is RUNNING again once resumed (its state and event), then SUCCESS', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    let suspended: Promise<boolean> | undefined;
    const pause = task({
      name: 'pause',
      execute: () => {
        suspended = engine.suspend('again');
        return 1;
      },
    }) as Task;
    const { make } = recorder();
    const flow = linearFlow('f', pause, make('b'));
    const error = await engine.run(flow, { inputs: {}, flowId: 'again' }).catch((e: unknown) => e);
    await suspended;
    expect(RiggingError.hasCode(error, 'tasks.suspended')).toBe(true);
    expect((error as Error).message).toBe('flow again suspended; resume it with engine.resume()');
    expect((error as RiggingError<string>).details).toEqual({ flowId: 'again' });
    const resumer = new Engine({ log });
    const states = flowStates(resumer);
    let during: string | undefined;
    const watch = resumer.on('task:state', (e) => {
      if (e.task === 'b' && e.state === 'RUNNING')
        void log.load('again').then((l) => (during ??= l!.record.state));
    });
    await resumer.resume('again', flow);
    watch();
    expect(states.map((s) => s.state)).toEqual(['RUNNING', 'SUCCESS']);
    expect(during).toBe('RUNNING');
  });

  it('an owner gone right after a task failed: the resume reverts at once (REVERTING, never RUNNING again)', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const { events, make } = recorder();
    const flow = linearFlow('f', make('a'), make('b', { fail: true }));
    const owner = new Engine({ log, locks: locks.provider });
    owner.on('task:state', (e) => {
      if (e.state === 'FAILURE') locks.lose('rigging-tasks:failed-then-gone');
    });
    await owner.run(flow, { inputs: {}, flowId: 'failed-then-gone' }).catch(() => undefined);
    expect((await log.load('failed-then-gone'))!.record.state).toBe('RUNNING');
    const engine = new Engine({ log, locks: locks.provider });
    const states = flowStates(engine);
    await engine.resume('failed-then-gone', flow).catch(() => undefined);
    expect(states.map((s) => s.state)).toEqual(['REVERTING', 'REVERTED']);
    expect(states[0]!.failure).toMatchObject({ task: 'b', message: 'b broke' });
    expect(events).toEqual(['exec a', 'fail b', 'revert a']);
  });

  it("a sub-flow's second retry interrupted before its next attempt started: the resume starts attempt 3", async () => {
    const log = memoryLog();
    const locks = testLocks();
    const events: string[] = [];
    let failures = 2;
    const flaky = task({
      name: 'x',
      execute: () => {
        if (failures-- > 0) {
          events.push('fail x');
          throw new Error('x broke');
        }
        events.push('exec x');
        return 1;
      },
    }) as Task;
    const flow = linearFlow({ name: 'inner', retry: times(2) }, flaky);
    const owner = new Engine({ log, locks: locks.provider });
    let retries = 0;
    owner.on('task:state', (e) => {
      if (e.state === 'RETRYING' && ++retries === 2) locks.lose('rigging-tasks:sub-2');
    });
    await owner.run(flow, { inputs: {}, flowId: 'sub-2' }).catch(() => undefined);
    expect(events).toEqual(['fail x', 'fail x']);
    await new Engine({ log, locks: locks.provider }).resume('sub-2', flow);
    expect(events).toEqual(['fail x', 'fail x', 'exec x']);
    const subflow = (await log.history('sub-2')).filter((e) => e.subflow);
    expect(subflow.map((e) => `${e.state} ${e.attempt}`)).toEqual([
      'RETRYING 1',
      'RUNNING 2',
      'RETRYING 2',
      'RUNNING 3',
    ]);
  });
});

describe('values a resume cannot read', () => {
  const secretFlow = (ran: string[]) =>
    linearFlow(
      'secret',
      task({
        name: 'login',
        requires: ['password'],
        sensitive: ['password'],
        provides: 'session',
        execute: (_ctx, { password }: { password: string }) => (
          ran.push('login'),
          `s-${password.length}`
        ),
      }),
      task({
        name: 'again',
        requires: ['password'],
        sensitive: ['password'],
        execute: () => (ran.push('again'), 1),
      }),
    );

  it('a task still to run that needs a redacted input fails the resume before anything runs, naming it; given again, it runs', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    const ran: string[] = [];
    const flow = secretFlow(ran);
    engine.on('task:state', (e) => {
      if (e.task === 'login' && e.state === 'SUCCESS') void engine.suspend('pw');
    });
    await engine
      .run(flow, { inputs: { password: 'hunter2' }, flowId: 'pw' })
      .catch(() => undefined);
    expect(ran).toEqual(['login']);
    const error = await new Engine({ log }).resume('pw', flow).catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.sensitive_unavailable')).toBe(true);
    expect((error as Error).message).toBe(
      "cannot resume flow pw: task 'again' needs 'password', which was not stored in clear; give the engine the secretKey or pass it in resume(…, { inputs })",
    );
    expect((error as RiggingError<string>).details).toEqual({
      flowId: 'pw',
      task: 'again',
      symbol: 'password',
    });
    expect(ran).toEqual(['login']);
    await new Engine({ log }).resume('pw', flow, { inputs: { password: 'hunter2' } });
    expect(ran).toEqual(['login', 'again']);
  });

  it('a completed task that needed a redacted input does not stop the resume', async () => {
    const log = memoryLog();
    const engine = new Engine({ log });
    const ran: string[] = [];
    const flow = linearFlow(
      'secret',
      task({
        name: 'login',
        requires: ['password'],
        sensitive: ['password'],
        execute: () => (ran.push('login'), 1),
      }),
      task({ name: 'after', execute: () => (ran.push('after'), 2) }),
    );
    engine.on('task:state', (e) => {
      if (e.task === 'login' && e.state === 'SUCCESS') void engine.suspend('done-pw');
    });
    await engine
      .run(flow, { inputs: { password: 'hunter2' }, flowId: 'done-pw' })
      .catch(() => undefined);
    await new Engine({ log }).resume('done-pw', flow);
    expect(ran).toEqual(['login', 'after']);
  });
});
