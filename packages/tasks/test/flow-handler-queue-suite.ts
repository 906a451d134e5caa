// flowHandler end to end on a real @rigging/async-queue: the same cases on every queue backend
// (memory, SQLite, PostgreSQL, MariaDB). A flow that can still finish (its lease lost, or
// suspended by the queue's stop signal) gives its op back without spending an attempt and later
// completes with its completed tasks run once; a real failure fails the op and the key's policy
// applies (`stop`: the key's next op is cancelled and the key blocked).
import { deferred, RiggingError } from '@rigging/core';
import {
  createQueue,
  handlerError,
  type Queue,
  type QueueBackend,
  type QueueEvents,
} from '@rigging/async-queue';
import { afterAll, expect, it } from 'vitest';
import {
  Engine,
  FlowFailed,
  flowHandler,
  linearFlow,
  task,
  type FlowHandlerContext,
  type TaskLog,
} from '../src/index.js';
import { testLocks } from './helpers.js';

/** What each case gets: a fresh queue backend (a new board on a durable one) and the task log. */
export interface QueueFlowBackend {
  /** A new, empty queue backend. Calling it again with the same `name` gives the same board. */
  queueBackend(name: string): QueueBackend;
  /** The task log every engine of the case writes to (shared by the case's "workers"). */
  log: TaskLog;
}

interface Tenant {
  tenant: string;
  fail?: boolean;
}

let seq = 0;

/**
 * A provision flow (volume → server → dns) whose tasks count their runs and reverts, with hooks
 * into the first run of `server`.
 */
function provision(hooks: { onServer?: (ctx: { lease?: { key: string } }) => unknown } = {}) {
  const runs: Record<string, number> = {};
  const reverted: string[] = [];
  const step = (name: string, requires: string, provides: string) =>
    task({
      name,
      requires: [requires, 'fail'],
      provides,
      execute: async (ctx, inputs: Record<string, unknown>) => {
        runs[name] = (runs[name] ?? 0) + 1;
        if (name === 'server' && runs[name] === 1) await hooks.onServer?.(ctx);
        if (name === 'dns' && inputs.fail === true) throw new Error('dns refused the record');
        return `${name}(${String(inputs[requires])})`;
      },
      revert: () => {
        reverted.push(name);
      },
    });
  const flow = linearFlow(
    'provision',
    step('volume', 'tenant', 'volume'),
    step('server', 'volume', 'server'),
    step('dns', 'server', 'dns'),
  );
  return { flow, runs, reverted };
}

const inputs = (p: Tenant) => ({ tenant: p.tenant, fail: p.fail === true });

/** Records a queue's events of interest. */
function watch(queue: Queue<any>) {
  const seen: { event: keyof QueueEvents; id: string; reason?: string | undefined }[] = [];
  for (const event of ['op:given-back', 'op:released', 'op:failed', 'op:retrying'] as const) {
    queue.on(event, (e: { id: string; reason?: string }) =>
      seen.push({ event, id: e.id, reason: e.reason }),
    );
  }
  return seen;
}

/** Registers the shared cases; `backend()` is read when a case starts (after `beforeAll`). */
export function flowHandlerOnQueue(backend: () => QueueFlowBackend) {
  const queues: Queue<any>[] = [];
  const track = <Q extends Queue<any>>(q: Q): Q => (queues.push(q), q);
  afterAll(async () => {
    await Promise.allSettled(queues.map((q) => q.close()));
  });
  const timeout = 60_000;

  it(
    'a lost lease gives the op back (no attempt spent); the next delivery resumes and finishes it',
    async () => {
      const b = backend();
      const locks = testLocks();
      const { flow, runs, reverted } = provision({
        // The engine loses the flow's lease while `server` runs (as after a network cut).
        onServer: (ctx) => locks.lose(ctx.lease!.key),
      });
      const engine = new Engine({ log: b.log, locks: locks.provider });
      const queue = track(
        createQueue({
          backend: b.queueBackend(`fhq${++seq}`),
          handlers: { provision: flowHandler(engine, flow, { inputs }) },
          policy: 'stop',
        }),
      );
      const seen = watch(queue);
      const id = await queue.cast('acme', { type: 'provision', payload: { tenant: 'acme' } });
      const out = await queue.wait(id, { timeoutMs: 30_000 });

      expect(out).toEqual({
        volume: 'volume(acme)',
        server: 'server(volume(acme))',
        dns: 'dns(server(volume(acme)))',
      });
      expect(runs).toEqual({ volume: 1, server: 1, dns: 1 });
      expect(reverted).toEqual([]);
      const givenBack = seen.filter((e) => e.event === 'op:given-back');
      expect(givenBack).toHaveLength(1);
      expect(givenBack[0]!.reason).toMatch(/ownership_lost/);
      expect(seen.filter((e) => e.event === 'op:failed' || e.event === 'op:retrying')).toEqual([]);
      const op = await queue.get(id);
      expect(op?.status).toBe('succeeded');
      expect(op?.attempts).toBe(1); // the give-back spent no attempt
      const states = (await engine.history(id)).filter((e) => e.task === null).map((e) => e.state);
      expect(states[0]).toBe('RUNNING');
      expect(states.at(-1)).toBe('SUCCESS');
      expect(states).not.toContain('REVERTING');
    },
    timeout,
  );

  it(
    "ownership 'claim': the flow runs under the queue's claim (no lock taken), its writes fenced by the claim's token",
    async () => {
      const b = backend();
      const locks = testLocks();
      let taskLease: { key: string; token?: bigint } | undefined;
      const { flow, runs } = provision({ onServer: (ctx) => (taskLease = ctx.lease) });
      const engine = new Engine({ log: b.log, locks: locks.provider });
      const queue = track(
        createQueue({
          backend: b.queueBackend(`fhq${++seq}`),
          handlers: { provision: flowHandler(engine, flow, { inputs, ownership: 'claim' }) },
        }),
      );
      const id = await queue.cast('umbrella', { type: 'provision', payload: { tenant: 'u' } });
      // The engine's own lock on the flow is held elsewhere: a run needing it would wait.
      await locks.provider.tryAcquire(`rigging-tasks:${id}`);
      expect(await queue.wait(id, { timeoutMs: 30_000 })).toMatchObject({
        dns: 'dns(server(volume(u)))',
      });
      expect(runs).toEqual({ volume: 1, server: 1, dns: 1 });
      expect(taskLease?.key).toBe('umbrella');
      const tokens = new Set((await engine.history(id)).map((e) => e.token));
      expect(tokens).toEqual(new Set([taskLease?.token]));
      expect(typeof taskLease?.token).toBe('bigint');
    },
    timeout,
  );

  it(
    "the queue's stop signal suspends the flow (nothing reverted) and hands the op back; another worker finishes it",
    async () => {
      const b = backend();
      const name = `fhq${++seq}`;
      const { flow, runs, reverted } = provision();
      // Worker A: `server` finishes only once A's queue has aborted the handler's signal.
      const aborted = deferred<void>();
      const serverStarted = deferred<void>();
      const slow = provision({
        onServer: async () => {
          serverStarted.resolve();
          await aborted.promise;
        },
      });
      const a = track(
        createQueue({
          backend: b.queueBackend(name),
          handlers: {
            provision: flowHandler(new Engine({ log: b.log }), slow.flow, {
              inputs: (p: Tenant, ctx: FlowHandlerContext) => {
                ctx.signal.addEventListener('abort', () => aborted.resolve(), { once: true });
                return inputs(p);
              },
            }),
          },
          closeGraceMs: 0,
        }),
      );
      const seenA = watch(a);
      const id = await a.cast('globex', { type: 'provision', payload: { tenant: 'globex' } });
      await serverStarted.promise;
      await a.close(); // shutdown: the handler's signal aborts, the op goes back to the board

      expect(slow.runs).toEqual({ volume: 1, server: 1 });
      expect(slow.reverted).toEqual([]);
      expect(seenA.filter((e) => e.event === 'op:failed')).toEqual([]);
      expect(seenA.some((e) => e.event === 'op:given-back' || e.event === 'op:released')).toBe(
        true,
      );
      const engine = new Engine({ log: b.log });
      expect((await engine.log.load(id))?.record.state).toBe('SUSPENDED');

      // Worker B (a new engine, as after a restart) takes the op and resumes the flow.
      const bq = track(
        createQueue({
          backend: b.queueBackend(name),
          handlers: { provision: flowHandler(engine, flow, { inputs }) },
        }),
      );
      const out = await bq.wait(id, { timeoutMs: 30_000 });
      expect(out).toMatchObject({ dns: 'dns(server(volume(globex)))' });
      // Completed tasks ran once across both workers; only `dns` ran on B.
      expect(runs).toEqual({ dns: 1 });
      expect(reverted).toEqual([]);
      const op = await bq.get(id);
      expect(op?.status).toBe('succeeded');
      expect(op?.attempts).toBe(1);
      const states = (await engine.history(id)).filter((e) => e.task === null).map((e) => e.state);
      expect(states).toEqual(['RUNNING', 'SUSPENDED', 'RUNNING', 'SUCCESS']);
    },
    timeout,
  );

  it(
    "a real failure fails the op (tasks reverted) and the key's `stop` policy cancels its next op",
    async () => {
      const b = backend();
      const { flow, runs, reverted } = provision();
      const queue = track(
        createQueue({
          backend: b.queueBackend(`fhq${++seq}`),
          handlers: { provision: flowHandler(new Engine({ log: b.log }), flow, { inputs }) },
          policy: 'stop',
        }),
      );
      const seen = watch(queue);
      const failing = await queue.cast('initech', {
        type: 'provision',
        payload: { tenant: 'initech', fail: true },
      });
      const next = await queue.cast('initech', {
        type: 'provision',
        payload: { tenant: 'initech' },
      });
      const failed = await queue.wait(failing, { timeoutMs: 30_000 }).catch((e: unknown) => e);
      expect(RiggingError.hasCode(failed, 'async-queue.op_failed')).toBe(true);
      const cause = handlerError(failed);
      expect(RiggingError.hasCode(cause, 'tasks.flow_failed')).toBe(true);
      if (cause instanceof FlowFailed) expect(cause.failures[0]?.task).toBe('dns');
      expect(reverted).toEqual(['server', 'volume']);

      const cancelled = await queue.wait(next, { timeoutMs: 30_000 }).catch((e: unknown) => e);
      expect(RiggingError.hasCode(cancelled, 'async-queue.op_cancelled')).toBe(true);
      expect(runs).toEqual({ volume: 1, server: 1, dns: 1 }); // the cancelled op never ran
      expect(await queue.keyStatus('initech')).toBe('blocked');
      expect(seen.filter((e) => e.event === 'op:given-back')).toEqual([]);
      expect(seen.filter((e) => e.event === 'op:failed').map((e) => e.id)).toEqual([failing]);
      expect((await queue.get(failing))?.attempts).toBe(1);
    },
    timeout,
  );
}
