import { deferred, sleep } from '@rigging/core';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type Handler,
  createQueue,
  QueueError,
  type QueueBackend,
  type QueueOptions,
  type Queue,
} from '../src/index.js';

/** Makes a fresh backend (a new queue name / namespace each call). */
export type BackendFactory = () => Promise<QueueBackend>;

let seq = 0;
const k = (name: string) => `${name}-${process.pid}-${++seq}`;

type H = {
  run: Handler<{ key: string; n: number; ms?: number; fail?: boolean }, Promise<number>>;
  create: Handler<{ gate?: boolean; fail?: boolean }, Promise<string>>;
  flaky: Handler<{ failTimes: number; tag: string }, Promise<number>>;
};

/**
 * The contract every backend honours. `durable` backends must also accept only JSON payloads.
 */
export function conformance(
  name: string,
  makeBackend: BackendFactory,
  opts: { slow?: boolean } = {},
) {
  const queues: Queue<any>[] = [];
  const timeout = opts.slow ? 60_000 : 20_000;

  afterAll(async () => {
    await Promise.allSettled(queues.map((q) => q.close()));
  });

  function harness(options: Partial<QueueOptions<H>> = {}) {
    const log: { key: string; n: number; phase: 'start' | 'end' }[] = [];
    const gates = new Map<string, ReturnType<typeof deferred<void>>>();
    const flakyCount = new Map<string, number>();
    const handlers: H = {
      async run(p) {
        log.push({ key: p.key, n: p.n, phase: 'start' });
        if (p.ms) await sleep(p.ms);
        log.push({ key: p.key, n: p.n, phase: 'end' });
        if (p.fail) throw new Error(`run ${p.n} failed`);
        return p.n;
      },
      async create(p, ctx) {
        if (p.gate) {
          const g = deferred<void>();
          gates.set(ctx.id, g);
          await g.promise;
        }
        if (p.fail) throw new Error('create failed');
        return `created ${ctx.key}`;
      },
      async flaky(p) {
        const n = (flakyCount.get(p.tag) ?? 0) + 1;
        flakyCount.set(p.tag, n);
        if (n <= p.failTimes) throw new Error(`flaky ${n}`);
        return n;
      },
    };
    return {
      log,
      gates,
      flakyCount,
      async queue(extra: Partial<QueueOptions<H>> = {}) {
        const q = createQueue<H>({
          backend: await makeBackend(),
          concurrency: 4,
          handlers,
          ...options,
          ...extra,
        });
        queues.push(q);
        return q;
      },
    };
  }

  const waitFor = async (pred: () => boolean | Promise<boolean>, ms = 10_000) => {
    const end = Date.now() + ms;
    while (!(await pred())) {
      if (Date.now() > end) throw new Error('condition not met in time');
      await sleep(5);
    }
  };

  describe(`${name}: conformance`, () => {
    it(
      'runs ops of one key strictly in order, keys in parallel (generated workloads)',
      async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(fc.tuple(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 2 })), {
              minLength: 1,
              maxLength: 30,
            }),
            fc.integer({ min: 1, max: 6 }),
            async (workload, concurrency) => {
              const h = harness();
              const q = await h.queue({ concurrency });
              const prefix = k('order');
              const expected = new Map<string, number[]>();
              const ids: string[] = [];
              for (const [i, [key, ms]] of workload.entries()) {
                const kk = `${prefix}-${key}`;
                expected.set(kk, [...(expected.get(kk) ?? []), i]);
                ids.push(await q.cast(kk, { type: 'run', payload: { key: kk, n: i, ms } }));
              }
              const results = await Promise.all(ids.map((id) => q.wait(id)));
              expect(results).toEqual(workload.map((_, i) => i));
              // per key: start/end alternate (no overlap) and follow enqueue order
              const running = new Map<string, number>();
              for (const e of h.log) {
                if (e.phase === 'start') {
                  expect(running.get(e.key)).toBeUndefined();
                  running.set(e.key, e.n);
                } else {
                  expect(running.get(e.key)).toBe(e.n);
                  running.delete(e.key);
                }
              }
              for (const [kk, ns] of expected) {
                expect(
                  h.log.filter((e) => e.key === kk && e.phase === 'start').map((e) => e.n),
                ).toEqual(ns);
              }
              // never more than `concurrency` running at once
              let now = 0;
              let max = 0;
              for (const e of h.log) {
                now += e.phase === 'start' ? 1 : -1;
                max = Math.max(max, now);
              }
              expect(max).toBeLessThanOrEqual(concurrency);
              await q.close();
            },
          ),
          { numRuns: opts.slow ? 5 : 25 },
        );
      },
      timeout * 3,
    );

    it(
      'cast returns an id at once; call returns the result over the same path',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('cc');
        const id = await q.cast(key, { type: 'run', payload: { key, n: 7 } });
        expect(typeof id).toBe('string');
        await expect(q.call(key, { type: 'run', payload: { key, n: 8 } })).resolves.toBe(8);
        expect(await q.wait(id)).toBe(7);
        const op = await q.get(id);
        expect(op).toMatchObject({
          id,
          key,
          type: 'run',
          status: 'succeeded',
          attempts: 1,
          result: 7,
        });
        expect(await q.keyStatus(key)).toBe('idle');
      },
      timeout,
    );

    it(
      'stop: later ops are cancelled with the cause, the key blocks until resume',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('stop');
        const events: string[] = [];
        q.on('key:blocked', (e) => events.push(`blocked ${e.key === key}`));
        const gate = await q.cast(key, { type: 'create', payload: { gate: true } });
        const bad = await q.cast(key, { type: 'run', payload: { key, n: 1, fail: true } });
        const later = await q.cast(key, { type: 'run', payload: { key, n: 2 } });
        const laterCall = q.wait(later);
        await waitFor(() => h.gates.has(gate));
        expect(await q.keyStatus(key)).toBe('create-in-progress');
        const info = await q.inspect(key);
        expect(info.running?.id).toBe(gate);
        expect(info.pending.map((o) => o.id)).toEqual([bad, later]);
        h.gates.get(gate)!.resolve();
        const err = await laterCall.catch((e: unknown) => e);
        expect(QueueError.isInstance(err) && err.code).toBe('async-queue.op_cancelled');
        expect(await q.get(bad)).toMatchObject({
          status: 'failed',
          error: { message: 'run 1 failed' },
        });
        expect(await q.get(later)).toMatchObject({ status: 'cancelled', cancelledBy: bad });
        expect(await q.keyStatus(key)).toBe('blocked');
        expect((await q.inspect(key)).blockedBy).toBe(bad);
        expect(await q.activeKeys()).toContainEqual({ key, status: 'blocked' });
        // The wait on `later` may end first (another path can read its cancellation) before the
        // worker's own record of the failure returns and reports the key blocked.
        await waitFor(() => events.length > 0);
        expect(events).toEqual(['blocked true']);
        // cancelled ops are not held; ops appended while blocked are, and say so
        expect((await q.get(later))?.held).toBeUndefined();
        const queued: { id: string; held: boolean | undefined }[] = [];
        q.on('op:queued', (e) => queued.push({ id: e.id, held: e.held }));
        const held = await q.cast(key, { type: 'run', payload: { key, n: 3 } });
        const held2 = await q.cast(key, { type: 'run', payload: { key, n: 4 } });
        expect(queued).toEqual([
          { id: held, held: true },
          { id: held2, held: true },
        ]);
        await sleep(50);
        expect(await q.get(held)).toMatchObject({ status: 'queued', held: true });
        const blockedInfo = await q.inspect(key);
        expect(blockedInfo.pending.map((o) => [o.id, o.status, o.held])).toEqual([
          [held, 'queued', true],
          [held2, 'queued', true],
        ]);
        expect(blockedInfo.held).toBe(2);
        expect(await q.resume(key)).toBe(true);
        expect(await q.wait(held)).toBe(3);
        expect(await q.wait(held2)).toBe(4);
        expect((await q.get(held))?.held).toBeUndefined();
        expect((await q.inspect(key)).held).toBe(0);
        // once resumed, new ops are ordinary queued ops again
        const after = await q.cast(key, { type: 'run', payload: { key, n: 5 } });
        expect(queued.at(-1)).toEqual({ id: after, held: false });
        expect(await q.wait(after)).toBe(5);
        expect(await q.keyStatus(key)).toBe('idle');
        const dead = await q.deadLetters();
        expect(dead.map((o) => o.id)).toContain(bad);
      },
      timeout,
    );

    it(
      'call rejects with op_failed carrying the handler error',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('fail');
        const err = await q
          .call(key, { type: 'create', payload: { fail: true } })
          .catch((e: unknown) => e);
        expect(QueueError.hasCode(err, 'async-queue.op_failed')).toBe(true);
        expect(((err as Error).cause as { message: string }).message).toBe('create failed');
      },
      timeout,
    );

    it(
      'discard cancels held ops and unblocks the key',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('discard');
        await q.call(key, { type: 'create', payload: { fail: true } }).catch(() => {});
        const held1 = await q.cast(key, { type: 'run', payload: { key, n: 1 } });
        const held2 = await q.cast(key, { type: 'run', payload: { key, n: 2 } });
        const w = q.wait(held1).catch((e: unknown) => e);
        expect(await q.discard(key)).toEqual([held1, held2]);
        expect(QueueError.hasCode(await w, 'async-queue.op_cancelled')).toBe(true);
        expect(await q.keyStatus(key)).toBe('idle');
        await expect(q.call(key, { type: 'run', payload: { key, n: 3 } })).resolves.toBe(3);
      },
      timeout,
    );

    it(
      'discard while an op runs cancels the queued ops only; the running op finishes',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('discard-running');
        const gate = await q.cast(key, { type: 'create', payload: { gate: true } });
        const later = await q.cast(key, { type: 'run', payload: { key, n: 1 } });
        await waitFor(() => h.gates.has(gate));
        expect(await q.get(gate)).toMatchObject({ status: 'running', attempts: 1 });
        expect(await q.discard(key)).toEqual([later]);
        expect(await q.get(later)).toMatchObject({ status: 'cancelled', cancelledBy: 'discard' });
        expect((await q.inspect(key)).running?.id).toBe(gate);
        h.gates.get(gate)!.resolve();
        await q.wait(gate);
        expect(await q.get(gate)).toMatchObject({ status: 'succeeded', attempts: 1 });
        expect(await q.keyStatus(key)).toBe('idle');
      },
      timeout,
    );

    it(
      'a blocked key does not stop other keys; a busy key does not starve others',
      async () => {
        const h = harness();
        const q = await h.queue({ concurrency: 1 });
        const blocked = k('blocked');
        const busy = k('busy');
        const other = k('other');
        await q.call(blocked, { type: 'create', payload: { fail: true } }).catch(() => {});
        await q.cast(blocked, { type: 'run', payload: { key: blocked, n: -1 } });
        const gate = await q.cast(busy, { type: 'create', payload: { gate: true } });
        await waitFor(() => h.gates.has(gate));
        const ids: string[] = [];
        for (let i = 0; i < 30; i++)
          ids.push(await q.cast(busy, { type: 'run', payload: { key: busy, n: i } }));
        const o = await q.cast(other, { type: 'run', payload: { key: other, n: 100 } });
        // Fairness is by the millisecond a key became ready: a completion in the same millisecond
        // as this enqueue ties, and the tie goes by key name ('busy' first). Not what is tested.
        await sleep(5);
        h.gates.get(gate)!.resolve();
        await q.wait(o);
        await Promise.all(ids.map((id) => q.wait(id)));
        const starts = h.log.filter((e) => e.phase === 'start');
        const otherAt = starts.findIndex((e) => e.key === other);
        expect(otherAt).toBeGreaterThanOrEqual(0);
        expect(otherAt).toBeLessThan(3);
        expect(starts.some((e) => e.key === blocked)).toBe(false);
        expect(await q.keyStatus(blocked)).toBe('blocked');
      },
      timeout,
    );

    it(
      'continue: a failure does not cancel later ops',
      async () => {
        const h = harness();
        const q = await h.queue({ policy: 'continue' });
        const key = k('continue');
        const a = await q.cast(key, { type: 'run', payload: { key, n: 1, fail: true } });
        const b = await q.cast(key, { type: 'run', payload: { key, n: 2 } });
        expect(await q.wait(b)).toBe(2);
        expect((await q.get(a))?.status).toBe('failed');
        expect(await q.keyStatus(key)).toBe('idle');
      },
      timeout,
    );

    it(
      'retries with backoff up to maxAttempts before applying the policy',
      async () => {
        const h = harness();
        const q = await h.queue({ policy: { maxAttempts: 3, backoff: { initialMs: 5 } } });
        const key = k('retry');
        const retries: number[] = [];
        q.on('op:retrying', (e) => retries.push(e.attempt));
        const failedAt: number[] = [];
        q.on('op:failed', (e) => failedAt.push(e.attempt));
        const tag = k('t');
        await expect(q.call(key, { type: 'flaky', payload: { failTimes: 2, tag } })).resolves.toBe(
          3,
        );
        expect(retries).toEqual([1, 2]);
        const tag2 = k('t');
        const id = await q.cast(key, { type: 'flaky', payload: { failTimes: 5, tag: tag2 } });
        await expect(q.wait(id)).rejects.toMatchObject({
          code: 'async-queue.op_failed',
          details: { attempts: 3 },
        });
        expect(failedAt).toEqual([3]);
        expect(h.flakyCount.get(tag2)).toBe(3);
        expect(await q.get(id)).toMatchObject({ status: 'failed', attempts: 3 });
        expect(await q.keyStatus(key)).toBe('blocked');
      },
      timeout,
    );

    it(
      'idempotencyKey dedupes enqueues',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('idem');
        const tag = k('tag');
        const idem = k('idem-key');
        const a = await q.cast(key, {
          type: 'flaky',
          payload: { failTimes: 0, tag },
          idempotencyKey: idem,
        });
        const b = await q.cast(key, {
          type: 'flaky',
          payload: { failTimes: 0, tag },
          idempotencyKey: idem,
        });
        expect(b).toBe(a);
        expect(await q.wait(a)).toBe(1);
        const c = await q.cast(key, {
          type: 'flaky',
          payload: { failTimes: 0, tag },
          idempotencyKey: idem,
        });
        expect(c).toBe(a);
        await q.onIdle();
        expect(h.flakyCount.get(tag)).toBe(1);
        await expect(
          q.cast(k('elsewhere'), {
            type: 'flaky',
            payload: { failTimes: 0, tag },
            idempotencyKey: idem,
          }),
        ).rejects.toMatchObject({ code: 'async-queue.idempotency_conflict' });
      },
      timeout,
    );

    it(
      'emits typed op and key events',
      async () => {
        const h = harness();
        const q = await h.queue();
        const key = k('events');
        const seen: string[] = [];
        q.onAny((event, payload) => {
          if ((payload as { key?: string }).key !== key) return;
          seen.push(
            event === 'key:status' ? `status:${(payload as { status: string }).status}` : event,
          );
        });
        await q.call(key, { type: 'create', payload: {} });
        expect(seen).toContain('op:queued');
        expect(seen).toContain('op:started');
        expect(seen).toContain('op:succeeded');
        expect(seen).toContain('status:create-in-progress');
        expect(seen.at(-1)).toBe('status:idle');
      },
      timeout,
    );

    it(
      'sync mode runs ops inline in cast/call with the same semantics',
      async () => {
        const h = harness();
        const q = await h.queue({ mode: 'sync' });
        const key = k('sync');
        const id = await q.cast(key, { type: 'run', payload: { key, n: 1 } });
        expect((await q.get(id))?.status).toBe('succeeded');
        expect(await q.call(key, { type: 'run', payload: { key, n: 2 } })).toBe(2);
        const failed = await q.cast(key, { type: 'create', payload: { fail: true } });
        expect((await q.get(failed))?.status).toBe('failed');
        expect(await q.keyStatus(key)).toBe('blocked');
        const held = await q.cast(key, { type: 'run', payload: { key, n: 3 } });
        expect(await q.get(held)).toMatchObject({ status: 'queued', held: true });
        await q.resume(key);
        expect((await q.get(held))?.status).toBe('succeeded');
        const q0 = await h.queue({ concurrency: 0 });
        expect(q0.mode).toBe('sync');
      },
      timeout,
    );

    it(
      'close aborts in-flight handlers after the grace period and gives their op back',
      async () => {
        const h = harness();
        let signal: AbortSignal | undefined;
        const started = deferred<void>();
        const backend = await makeBackend();
        const q = createQueue({
          backend,
          concurrency: 2,
          closeGraceMs: 50,
          handlers: {
            async slow(_p: null, ctx) {
              signal = ctx.signal;
              started.resolve();
              await new Promise((_, reject) =>
                ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)),
              );
            },
          },
        });
        void h;
        const key = k('close');
        const id = await q.cast(key, { type: 'slow', payload: null });
        const w = q.wait(id).catch((e: unknown) => e);
        await started.promise;
        await q.close();
        expect(signal?.aborted).toBe(true);
        expect(QueueError.hasCode(await w, 'async-queue.closed')).toBe(true);
        await expect(q.cast(key, { type: 'slow', payload: null })).rejects.toMatchObject({
          code: 'async-queue.closed',
        });
      },
      timeout,
    );

    it(
      'close waits closeAbortWaitMs for aborted handlers to stop before giving their ops back',
      async () => {
        /** A handler that, once aborted, takes `stopMs` to reach a boundary, then succeeds. */
        const run = async (closeAbortWaitMs: number, stopMs: number) => {
          const started = deferred<void>();
          const q = createQueue({
            backend: await makeBackend(),
            closeGraceMs: 0,
            closeAbortWaitMs,
            handlers: {
              async step(_p: null, ctx) {
                started.resolve();
                await new Promise((done) => ctx.signal.addEventListener('abort', done));
                await new Promise((done) => setTimeout(done, stopMs));
                return 'stopped at a boundary';
              },
            },
          });
          const released: string[] = [];
          q.on('op:released', (e) => released.push(e.id));
          const id = await q.cast(k(`abort-wait-${closeAbortWaitMs}`), {
            type: 'step',
            payload: null,
          });
          const outcome = q.wait(id).catch((e: unknown) => e);
          await started.promise;
          await q.close();
          return { outcome: await outcome, released: released.length };
        };
        // Longer than the former fixed second: the handler's own outcome stands.
        expect(await run(3000, 1200)).toEqual({ outcome: 'stopped at a boundary', released: 0 });
        // Shorter than the handler needs: its op is given back.
        const late = await run(50, 400);
        expect(late.released).toBe(1);
        expect(QueueError.hasCode(late.outcome, 'async-queue.closed')).toBe(true);
      },
      timeout,
    );

    it(
      'sync mode: concurrent calls on one key never overlap',
      async () => {
        const h = harness();
        const q = await h.queue({ mode: 'sync' });
        const key = k('sync-overlap');
        const results = await Promise.all(
          [1, 2, 3].map((n) => q.call(key, { type: 'run', payload: { key, n, ms: 30 } })),
        );
        expect(results).toEqual([1, 2, 3]);
        // Concurrent enqueues are stored in some order (on a durable backend, not necessarily
        // call order); whatever it is, each op ends before the next starts.
        expect(h.log).toHaveLength(6);
        for (let i = 0; i < 6; i += 2) {
          expect([h.log[i]!.phase, h.log[i + 1]!.phase]).toEqual(['start', 'end']);
          expect(h.log[i + 1]!.n).toBe(h.log[i]!.n);
        }
      },
      timeout,
    );

    it(
      'giveBack: the op goes back unfinished and uncounted, at the head of its key; call waits on',
      async () => {
        const runs: string[] = [];
        let backs = 0;
        const q = createQueue({
          backend: await makeBackend(),
          concurrency: 2,
          policy: 'stop',
          handlers: {
            async op(p: { n: number }, ctx) {
              runs.push(`${p.n}:${ctx.attempt}`);
              expect(ctx.opId).toBe(ctx.id);
              expect(ctx.signal.aborted).toBe(false);
              if (p.n === 1 && backs < 2) {
                backs++;
                ctx.giveBack(`not yet ${backs}`, { delayMs: backs === 1 ? 150 : 0 });
              }
              return p.n;
            },
          },
        });
        queues.push(q);
        const key = k('give-back');
        const given: { id: string; key: string; reason: string | undefined; retryAt: number }[] =
          [];
        const failed: string[] = [];
        q.on('op:given-back', (e) => given.push(e));
        q.on('op:failed', (e) => failed.push(e.id));
        q.on('op:retrying', (e) => failed.push(e.id));
        const first = deferred<void>();
        q.once('op:given-back', () => first.resolve());
        const a = await q.cast(key, { type: 'op', payload: { n: 1 } });
        const b = await q.cast(key, { type: 'op', payload: { n: 2 } });
        const callA = q.wait(a);
        const callB = q.wait(b);
        const t0 = Date.now();
        await first.promise;
        // Given back with a delay: the head of its key again, uncounted, the next op behind it.
        const info = await q.inspect(key);
        expect(info.running).toBeUndefined();
        expect(info.pending.map((o) => [o.id, o.status, o.attempts])).toEqual([
          [a, 'queued', 0],
          [b, 'queued', 0],
        ]);
        expect(await callA).toBe(1);
        expect(Date.now() - t0).toBeGreaterThanOrEqual(100);
        expect(await callB).toBe(2);
        expect(runs).toEqual(['1:1', '1:1', '1:1', '2:1']);
        expect(await q.get(a)).toMatchObject({ status: 'succeeded', attempts: 1, result: 1 });
        expect(given.map((e) => [e.id, e.key, e.reason])).toEqual([
          [a, key, 'not yet 1'],
          [a, key, 'not yet 2'],
        ]);
        expect(given[0]!.retryAt - t0).toBeGreaterThanOrEqual(100);
        expect(failed).toEqual([]);
        expect(await q.keyStatus(key)).toBe('idle');
      },
      timeout,
    );

    it(
      'giveBack: refuses a bad delay as a handler error; sync mode gives back and runs again',
      async () => {
        let backs = 0;
        const q = createQueue({
          backend: await makeBackend(),
          mode: 'sync',
          handlers: {
            async op(p: { delayMs: number }, ctx) {
              if (backs++ === 0) ctx.giveBack(undefined, { delayMs: p.delayMs });
              return backs;
            },
          },
        });
        queues.push(q);
        const key = k('give-back-sync');
        await expect(q.call(key, { type: 'op', payload: { delayMs: 20 } })).resolves.toBe(2);
        backs = 0;
        const err = await q
          .call(k('give-back-bad'), { type: 'op', payload: { delayMs: -1 } })
          .catch((e: unknown) => e);
        expect(QueueError.hasCode(err, 'async-queue.op_failed')).toBe(true);
        expect(String((err as Error).cause && (err as { cause: Error }).cause.message)).toMatch(
          /delayMs/,
        );
      },
      timeout,
    );

    it(
      'giveBack: ops given back any number of times all complete, in per-key order (generated)',
      async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 3 })), {
              minLength: 1,
              maxLength: 20,
            }),
            fc.integer({ min: 1, max: 4 }),
            async (workload, concurrency) => {
              const starts: { key: string; n: number }[] = [];
              const running = new Set<string>();
              let overlaps = 0;
              const seen = new Map<number, number>();
              const q = createQueue({
                backend: await makeBackend(),
                concurrency,
                handlers: {
                  async op(p: { key: string; n: number; backs: number }, ctx) {
                    if (running.has(p.key)) overlaps++;
                    running.add(p.key);
                    starts.push({ key: p.key, n: p.n });
                    await sleep(p.n % 2);
                    running.delete(p.key);
                    const times = (seen.get(p.n) ?? 0) + 1;
                    seen.set(p.n, times);
                    if (times <= p.backs) ctx.giveBack(`back ${times}`);
                    return p.n;
                  },
                },
              });
              const prefix = k('give-back-order');
              const ids: string[] = [];
              for (const [i, [key, backs]] of workload.entries()) {
                const kk = `${prefix}-${key}`;
                ids.push(await q.cast(kk, { type: 'op', payload: { key: kk, n: i, backs } }));
              }
              try {
                const results = await Promise.all(ids.map((id) => q.wait(id)));
                expect(results).toEqual(workload.map((_, i) => i));
                expect(overlaps).toBe(0);
                for (const [i, [, backs]] of workload.entries()) {
                  expect(seen.get(i)).toBe(backs + 1);
                  expect((await q.get(ids[i]!))?.attempts).toBe(1);
                }
                // Per key, runs never go back to an earlier op: 0,0,1,2,2,2,…
                const byKey = new Map<string, number[]>();
                for (const s of starts) byKey.set(s.key, [...(byKey.get(s.key) ?? []), s.n]);
                for (const ns of byKey.values()) {
                  expect(ns).toEqual([...ns].sort((x, y) => x - y));
                }
              } finally {
                await q.close();
              }
            },
          ),
          { numRuns: opts.slow ? 5 : 25 },
        );
      },
      timeout * 3,
    );

    it(
      'drained(key) and drained() resolve once nothing is pending or running',
      async () => {
        const gate = deferred<void>();
        const worker = createQueue({
          backend: await makeBackend(),
          concurrency: 2,
          handlers: {
            async make(p: { n: number }) {
              if (p.n === 0) await gate.promise;
              return p.n * 2;
            },
          },
        });
        queues.push(worker);
        const key = k('drain');
        const other = k('drain-other');
        await expect(worker.drained(key)).resolves.toBeUndefined();
        const a = await worker.cast(key, { type: 'make', payload: { n: 0 } });
        const b = await worker.cast(key, { type: 'make', payload: { n: 1 } });
        await worker.cast(other, { type: 'make', payload: { n: 2 } });
        let keyDrained = false;
        let allDrained = false;
        const whole = worker
          .drained(undefined, { timeoutMs: 15_000 })
          .then(() => (allDrained = true));
        const one = worker.drained(key).then(() => (keyDrained = true));
        await expect(worker.drained(key, { timeoutMs: 50 })).rejects.toMatchObject({
          code: 'async-queue.timeout',
        });
        const aborted = new AbortController();
        const cancelled = worker.drained(key, { signal: aborted.signal }).catch((e: unknown) => e);
        aborted.abort(new Error('stop waiting'));
        expect(((await cancelled) as Error).message).toBe('stop waiting');
        await expect(worker.drained(other, { timeoutMs: 15_000 })).resolves.toBeUndefined();
        expect([keyDrained, allDrained]).toEqual([false, false]);
        gate.resolve();
        await one;
        await whole;
        expect(await worker.get(a)).toMatchObject({ status: 'succeeded', result: 0 });
        expect(await worker.get(b)).toMatchObject({ status: 'succeeded', result: 2 });
        await expect(worker.drained(key, { timeoutMs: -1 })).rejects.toThrow(TypeError);
      },
      timeout,
    );

    it(
      'a producer typed by an op-type map stores ops without handlers; drained waits for them',
      async () => {
        const producer = createQueue<{ make: { payload: { n: number }; result: number } }>({
          backend: await makeBackend(),
          worker: false,
          types: ['make'],
        });
        queues.push(producer);
        const key = k('producer');
        const id = await producer.cast(key, { type: 'make', payload: { n: 1 } });
        expect(await producer.get(id)).toMatchObject({ status: 'queued', type: 'make' });
        await expect(
          producer.cast(key, { type: 'nope' as 'make', payload: { n: 3 } }),
        ).rejects.toMatchObject({ code: 'async-queue.unknown_type' });
        // Nobody runs it here: the key is not drained.
        await expect(producer.drained(key, { timeoutMs: 100 })).rejects.toMatchObject({
          code: 'async-queue.timeout',
        });
        await expect(producer.drained(undefined, { timeoutMs: 100 })).rejects.toMatchObject({
          code: 'async-queue.timeout',
        });
      },
      timeout,
    );

    it(
      'rejects unknown op types',
      async () => {
        const h = harness();
        const q = await h.queue();
        await expect(
          q.cast(k('x'), { type: 'nope' as 'run', payload: { key: 'x', n: 1 } }),
        ).rejects.toMatchObject({
          code: 'async-queue.unknown_type',
        });
      },
      timeout,
    );
  });
}
