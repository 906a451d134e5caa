import { describe, expect, it } from 'vitest';
import { deferred, ManualClock, RiggingError, type Deferred, type Logger } from '@rigging/core';
import {
  Engine,
  FlowFailed,
  linearFlow,
  memoryLog,
  task,
  type RecoveryErrorEvent,
  type RecoveryFinishedEvent,
  type RecoveryRefusedEvent,
  type TaskLog,
} from '../src/index.js';
import { testLocks } from './helpers.js';

/** A flow named `name` whose tasks count runs; `hold` pauses a task's first run until its gate. */
function counted(name: string, hold?: { task: string; gate: Deferred<void> }) {
  const runs: Record<string, number> = {};
  const started = deferred<void>();
  const step = (t: string) =>
    task({
      name: t,
      provides: t,
      execute: async () => {
        runs[t] = (runs[t] ?? 0) + 1;
        if (hold?.task === t && runs[t] === 1) {
          started.resolve();
          await hold.gate.promise;
        }
        return `${t}!`;
      },
    });
  return { runs, started, flow: linearFlow(name, step('a'), step('b'), step('c')) };
}

/** Leaves `flowId` RUNNING in `log` with 'a' done, its owner gone (lease lost, never written again). */
/** A logger that keeps what is warned, `[object, message]` each. */
function warningLogger(): { logger: Logger; warnings: unknown[] } {
  const warnings: unknown[] = [];
  const logger: Logger = {
    trace() {},
    debug() {},
    info() {},
    warn: (obj: unknown, msg?: unknown) => void warnings.push([obj, msg]),
    error() {},
    fatal() {},
    child: () => logger,
  };
  return { logger, warnings };
}

async function orphan(
  log: TaskLog,
  locks: ReturnType<typeof testLocks>,
  flowId: string,
  name = 'job',
) {
  const gate = deferred<void>();
  const spy = counted(name, { task: 'b', gate });
  const owner = new Engine({ log, locks: locks.provider });
  const running = owner.run(spy.flow, { flowId, inputs: {} }).catch((e: unknown) => e);
  await spy.started.promise;
  locks.lose(`rigging-tasks:${flowId}`);
  gate.resolve();
  expect(RiggingError.hasCode(await running, 'tasks.ownership_lost')).toBe(true);
  expect((await log.load(flowId))!.record.state).toBe('RUNNING');
  return spy.runs;
}

function collect(recovery: {
  on: (e: 'recovery:finished', l: (p: RecoveryFinishedEvent) => void) => unknown;
}) {
  const finished: RecoveryFinishedEvent[] = [];
  recovery.on('recovery:finished', (e) => finished.push(e));
  return finished;
}

describe('engine.startRecovery', () => {
  it('resumes an orphaned flow at start, without re-running completed tasks', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const before = await orphan(log, locks, 'o1');
    expect(before).toEqual({ a: 1, b: 1 });
    const { runs, flow } = counted('job');
    const engine = new Engine({ log, locks: locks.provider, clock: new ManualClock() });
    await using recovery = engine.startRecovery({ flows: [flow] });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ flowId: 'o1', flow: 'job', outcome: 'succeeded' });
    // 'a' and 'b' completed before; only 'c' runs now.
    expect(runs).toEqual({ c: 1 });
    expect((await log.load('o1'))!.record.state).toBe('SUCCESS');
  });

  it('leaves a flow with a live owner alone, and recovers it at a later scan once the owner is gone', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const live = counted('job', { task: 'b', gate });
    const owner = new Engine({ log, locks: locks.provider });
    const owned = owner.run(live.flow, { flowId: 'o2', inputs: {} }).catch((e: unknown) => e);
    await live.started.promise;

    const clock = new ManualClock();
    const { runs, flow } = counted('job');
    const engine = new Engine({ log, locks: locks.provider, clock });
    await using recovery = engine.startRecovery({ flows: [flow], intervalMs: 1000 });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ flowId: 'o2', outcome: 'busy' });
    expect(runs).toEqual({});

    // The owner dies (its lease is lost); the next scan, one interval later, takes the flow over.
    locks.lose('rigging-tasks:o2');
    gate.resolve();
    expect(RiggingError.hasCode(await owned, 'tasks.ownership_lost')).toBe(true);
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(recovery.scans).toBe(1);
    await clock.advance(1000);
    await expect.poll(() => finished.length).toBe(2);
    expect(recovery.scans).toBe(2);
    expect(finished[1]).toMatchObject({ flowId: 'o2', outcome: 'succeeded' });
    expect(runs).toEqual({ c: 1 });
  });

  it('refuses a changed definition (reported once), and goes on with the other flows', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 'old', 'job');
    await orphan(log, locks, 'other', 'other-job');
    const changed = linearFlow('job', task({ name: 'only', execute: () => 1 }));
    const { runs, flow: otherFlow } = counted('other-job');
    const clock = new ManualClock();
    const { logger, warnings } = warningLogger();
    const engine = new Engine({ log, locks: locks.provider, clock, logger });
    await using recovery = engine.startRecovery({ flows: [changed, otherFlow], intervalMs: 10 });
    const refused: RecoveryRefusedEvent[] = [];
    recovery.on('recovery:refused', (e) => refused.push(e));
    const finished = collect(recovery);
    await expect.poll(() => finished.length + refused.length).toBe(2);
    expect(refused).toHaveLength(1);
    expect(refused[0]!.flowId).toBe('old');
    expect(RiggingError.hasCode(refused[0]!.error, 'tasks.incompatible_log')).toBe(true);
    expect(warnings).toEqual([
      [
        { err: refused[0]!.error, flowId: 'old', flow: 'job' },
        'flow recovery: this flow cannot be resumed here',
      ],
    ]);
    expect(finished[0]).toMatchObject({ flowId: 'other', outcome: 'succeeded' });
    expect(runs).toEqual({ c: 1 });
    // Later scans do not report it again.
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    await clock.advance(10);
    await expect.poll(() => recovery.scans).toBe(2);
    await new Promise((r) => setTimeout(r, 10));
    expect(refused).toHaveLength(1);
    expect((await log.load('old'))!.record.state).toBe('RUNNING');
  });

  it('resumes at most `concurrency` flows at once, and all of them in the end', async () => {
    const log = memoryLog();
    const locks = testLocks();
    for (const id of ['c1', 'c2', 'c3', 'c4']) await orphan(log, locks, id);
    let inFlight = 0;
    let most = 0;
    const slow = linearFlow(
      'job',
      ...['a', 'b', 'c'].map((t) =>
        task({
          name: t,
          provides: t,
          execute: async () => {
            inFlight++;
            most = Math.max(most, inFlight);
            await new Promise((r) => setTimeout(r, 5));
            inFlight--;
            return `${t}!`;
          },
        }),
      ),
    );
    const engine = new Engine({ log, locks: locks.provider, clock: new ManualClock() });
    await using recovery = engine.startRecovery({ flows: [slow], concurrency: 2 });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(4);
    expect(finished.every((f) => f.outcome === 'succeeded')).toBe(true);
    expect(most).toBe(2);
    expect(recovery.scans).toBe(1); // one scan: freed slots took the rest
  });

  it('stop() suspends the flows being resumed (nothing reverted) and ends the scans', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 's1');
    const gate = deferred<void>();
    const { flow, started } = counted('job', { task: 'c', gate });
    const clock = new ManualClock();
    const engine = new Engine({ log, locks: locks.provider, clock });
    const recovery = engine.startRecovery({ flows: [flow] });
    const finished = collect(recovery);
    await started.promise;
    expect(recovery.recovering).toEqual(['s1']);
    const stopping = recovery.stop();
    gate.resolve();
    await stopping;
    expect(finished[0]).toMatchObject({ flowId: 's1', outcome: 'stopped' });
    expect((await log.load('s1'))!.record.state).toBe('SUSPENDED');
    expect(clock.pendingSleeps).toBe(0);
    await recovery.stop(); // idempotent
  });

  it('refuses bad options', () => {
    const engine = new Engine();
    const { flow } = counted('job');
    expect(() => engine.startRecovery({ flows: [] })).toThrow(TypeError);
    expect(() => engine.startRecovery({ flows: [flow, flow] })).toThrow(TypeError);
    expect(() => engine.startRecovery({ flows: [flow], concurrency: 0 })).toThrow(TypeError);
    expect(() => engine.startRecovery({ flows: [flow], intervalMs: -5 })).toThrow(TypeError);
  });
});

describe('engine.startRecovery: what a scan takes', () => {
  it('lists the log with its states and limit, and resumes the oldest first; flows of other names are left alone', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const clock = new ManualClock();
    for (const id of ['first', 'second']) {
      await orphan(log, locks, id);
      await new Promise((r) => setTimeout(r, 5)); // created at another millisecond
    }
    await orphan(log, locks, 'foreign', 'someone-else');
    const asked: unknown[] = [];
    const listing: TaskLog = {
      ...log,
      flows: (options) => (asked.push(options), log.flows(options)),
    };
    const { flow } = counted('job');
    const engine = new Engine({ log: listing, locks: locks.provider, clock });
    await using recovery = engine.startRecovery({ flows: [flow], concurrency: 1, limit: 7 });
    const resuming: string[] = [];
    recovery.on('recovery:resuming', (e) => resuming.push(e.flowId));
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(2);
    expect(asked).toEqual([{ states: ['RUNNING', 'REVERTING'], limit: 7 }]);
    expect(resuming).toEqual(['first', 'second']);
    expect((await log.load('foreign'))!.record.state).toBe('RUNNING');
  });

  it('`states` picks which flows count as unfinished (SUSPENDED ones on request)', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 'running');
    const suspender = new Engine({ log, locks: locks.provider });
    const { flow: held } = counted('job');
    let suspended: Promise<boolean> | undefined;
    const pausing = linearFlow(
      'job',
      task({
        name: 'a',
        provides: 'a',
        execute: () => ((suspended = suspender.suspend('paused')), 'a!'),
      }),
      task({ name: 'b', provides: 'b', execute: () => 'b!' }),
      task({ name: 'c', provides: 'c', execute: () => 'c!' }),
    );
    await suspender.run(pausing, { inputs: {}, flowId: 'paused' }).catch(() => undefined);
    await suspended;
    const engine = new Engine({ log, locks: locks.provider, clock: new ManualClock() });
    await using recovery = engine.startRecovery({ flows: [held], states: ['SUSPENDED'] });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ flowId: 'paused', outcome: 'succeeded' });
    expect((await log.load('running'))!.record.state).toBe('RUNNING');
  });

  it('a flow that fails on resume is reported failed (its rollback done), with the error', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 'doomed');
    const reverted: string[] = [];
    const step = (name: string, fail = false) =>
      task({
        name,
        provides: name,
        execute: () => {
          if (fail) throw new Error(`${name} broke`);
          return `${name}!`;
        },
        revert: () => {
          reverted.push(name);
        },
      });
    const flow = linearFlow('job', step('a'), step('b'), step('c', true));
    const engine = new Engine({ log, locks: locks.provider, clock: new ManualClock() });
    await using recovery = engine.startRecovery({ flows: [flow] });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ flowId: 'doomed', flow: 'job', outcome: 'failed' });
    expect(finished[0]!.error).toBeInstanceOf(FlowFailed);
    expect(reverted).toEqual(['b', 'a']);
    expect((await log.load('doomed'))!.record.state).toBe('REVERTED');
  });

  it('passes its migrate hook on to resume', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 'renamed');
    const runs: string[] = [];
    const step = (name: string) =>
      task({ name, provides: name, execute: () => (runs.push(name), `${name}!`) });
    const flow = linearFlow('job', step('a'), step('b2'), step('c'));
    const engine = new Engine({ log, locks: locks.provider, clock: new ManualClock() });
    await using recovery = engine.startRecovery({
      flows: [flow],
      migrate: () => ({ accept: true, rename: { b: 'b2' } }),
    });
    const finished = collect(recovery);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ outcome: 'succeeded' });
    expect(runs).toEqual(['c']);
  });

  it('a failed listing is reported (recovery:error, a warning) and the next scan tries again', async () => {
    const log = memoryLog();
    const locks = testLocks();
    await orphan(log, locks, 'later');
    let broken = true;
    const flaky: TaskLog = {
      ...log,
      flows: (options) => (broken ? Promise.reject(new Error('log down')) : log.flows(options)),
    };
    const { logger, warnings } = warningLogger();
    const clock = new ManualClock(5);
    const engine = new Engine({ log: flaky, locks: locks.provider, clock, logger });
    const { flow } = counted('job');
    await using recovery = engine.startRecovery({ flows: [flow], intervalMs: 100 });
    const errors: RecoveryErrorEvent[] = [];
    recovery.on('recovery:error', (e) => errors.push(e));
    const finished = collect(recovery);
    await expect.poll(() => errors.length).toBe(1);
    expect(errors[0]).toMatchObject({ error: { message: 'log down' }, at: 5 });
    expect(warnings).toEqual([
      [{ err: errors[0]!.error }, 'flow recovery: listing the task log failed'],
    ]);
    broken = false;
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    await clock.advance(100);
    await expect.poll(() => finished.length).toBe(1);
    expect(finished[0]).toMatchObject({ flowId: 'later', outcome: 'succeeded', at: 105 });
  });

  it('skips the flows this engine is running itself', async () => {
    const log = memoryLog();
    const gate = deferred<void>();
    const mine = counted('job', { task: 'b', gate });
    const engine = new Engine({ log, clock: new ManualClock() });
    const running = engine.run(mine.flow, { inputs: {}, flowId: 'mine' });
    await mine.started.promise;
    const { flow } = counted('job');
    await using recovery = engine.startRecovery({ flows: [flow] });
    const resuming: string[] = [];
    recovery.on('recovery:resuming', (e) => resuming.push(e.flowId));
    await expect.poll(() => recovery.scans).toBe(1);
    await new Promise((r) => setTimeout(r, 10));
    expect(resuming).toEqual([]);
    gate.resolve();
    await running;
  });

  it('its signal stops it: at once when already aborted (no scan), else as stop() does', async () => {
    const engine = new Engine({ clock: new ManualClock() });
    const { flow } = counted('job');
    const recovery = engine.startRecovery({ flows: [flow], signal: AbortSignal.abort() });
    expect(recovery.stopped).toBe(true);
    await recovery.stop();
    expect(recovery.scans).toBe(0);
    await recovery.scan();
    expect(recovery.scans).toBe(0);

    const ac = new AbortController();
    const clock = new ManualClock();
    const live = new Engine({ clock }).startRecovery({ flows: [flow], signal: ac.signal });
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(live.stopped).toBe(false);
    ac.abort(new Error('shutting down'));
    expect(live.stopped).toBe(true);
    await live.stop();
    expect(live.scans).toBe(1);
    expect(clock.pendingSleeps).toBe(0);
  });

  it('refuses every malformed option with a TypeError naming it', () => {
    const engine = new Engine();
    const { flow } = counted('job');
    const bad: [unknown, RegExp][] = [
      [undefined, /options must be an object/],
      ['flows', /options must be an object/],
      [{ flows: 'job' }, /flows must be a non-empty array/],
      [{ flows: [null] }, /every entry must be a flow or a task/],
      [{ flows: [{ name: 3 }] }, /every entry must be a flow or a task/],
      [{ flows: [flow, flow] }, /two definitions are named 'job'/],
      [{ flows: [flow], concurrency: 0 }, /startRecovery.*concurrency/],
      [{ flows: [flow], intervalMs: -1 }, /startRecovery.*intervalMs/],
      [{ flows: [flow], limit: 1.5 }, /startRecovery.*limit/],
      [{ flows: [flow], states: [] }, /states must be a non-empty array/],
      [{ flows: [flow], states: 'RUNNING' }, /states must be a non-empty array/],
    ];
    for (const [options, message] of bad) {
      expect(() => engine.startRecovery(options as never), String(message)).toThrow(TypeError);
      expect(() => engine.startRecovery(options as never)).toThrow(message);
    }
  });
});
