import { deferred, silentLogger, sleep, systemClock } from '@rigging/core';
import fc from 'fast-check';
import type { Database } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { twoHandles } from './fixtures/two-handles.js';
import { createQueue, type HandlerContext, type Queue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const backends = await sqlBackends('async_queue_jb', ['sqlite-file', 'postgres', 'mysql']);

const waitFor = async (pred: () => boolean | Promise<boolean>, ms = 15_000) => {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(10);
  }
};

for (const b of backends) {
  describe.skipIf(!b.available)(`jobboard on ${b.kind}`, () => {
    // Processes are tested elsewhere: here two handles (one on SQLite) in this process.
    const h = twoHandles(b);
    const { queues } = h;
    let n = 0;
    const track = <Q extends Queue<any>>(q: Q) => (queues.push(q), q);

    it('two instances on two connections share the work and keep per-key order', async () => {
      const name = `share${++n}`;
      const log = new Map<string, number[]>();
      const by = new Map<string, number>();
      const make = (db: Database, worker: string) =>
        track(
          createQueue({
            backend: sqlBackend(db, { name, pollMs: 20 }),
            concurrency: 4,
            workerId: worker,
            handlers: {
              async step(p: { key: string; n: number }) {
                await sleep(1);
                log.set(p.key, [...(log.get(p.key) ?? []), p.n]);
                by.set(worker, (by.get(worker) ?? 0) + 1);
                return p.n;
              },
            },
          }),
        );
      const a = make(h.db1, 'a');
      const c = make(h.db2, 'b');
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) {
        for (let key = 0; key < 8; key++) {
          ids.push(
            await (i % 2 ? a : c).cast(`k${key}`, {
              type: 'step',
              payload: { key: `k${key}`, n: i },
            }),
          );
        }
      }
      await Promise.all(ids.map((id) => a.wait(id)));
      for (let key = 0; key < 8; key++) expect(log.get(`k${key}`)).toEqual([...Array(10).keys()]);
      expect(by.get('a')! + by.get('b')!).toBe(80);
      expect(by.get('a')).toBeGreaterThan(0);
      expect(by.get('b')).toBeGreaterThan(0);
    }, 60_000);

    it('batched successes and chained claims of two instances: per-key order, one run at a time, each op once (generated)', async () => {
      // Handlers finish at once (most in the turn they started in), so successes are recorded in
      // batches that claim the next ops; some ops are given back or fail once and run again, so
      // a key's head goes back to `queued` after it was claimed. A batch that granted one key
      // twice, skipped a head given back or took an op out of order fails this.
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.record({
              key: fc.integer({ min: 0, max: 5 }),
              redo: fc.constantFrom('none', 'none', 'none', 'giveBack', 'fail'),
              wait: fc.boolean(),
            }),
            { minLength: 1, maxLength: 40 },
          ),
          fc.integer({ min: 1, max: 8 }),
          async (workload, concurrency) => {
            const name = `prop${++n}`;
            const running = new Set<string>();
            let overlaps = 0;
            let early = 0;
            const finished = new Set<number>();
            const starts: { key: string; i: number }[] = [];
            const done: { key: string; i: number }[] = [];
            const runs = new Map<number, number>();
            type P = { key: string; i: number; redo: string; wait: boolean };
            // On PostgreSQL a long poll keeps claims and successes on the single-statement paths
            // (a look for expired leases, due every `pollMs`, takes the transactional ones);
            // NOTIFY wakes the workers. Elsewhere workers are woken by polling.
            const pollMs = b.kind === 'postgres' ? 60_000 : 20;
            const make = (db: Database, worker: string) =>
              createQueue({
                backend: sqlBackend(db, { name, pollMs }),
                concurrency,
                workerId: worker,
                policy: { maxAttempts: 2, backoff: { initialMs: 1 } },
                handlers: {
                  async op(p: P, ctx: HandlerContext) {
                    if (running.has(p.key)) overlaps++;
                    // Every earlier op of the key has completed before this one starts.
                    for (const [j, w] of workload.entries()) {
                      if (j < p.i && `k${w.key}` === p.key && !finished.has(j)) early++;
                    }
                    running.add(p.key);
                    starts.push({ key: p.key, i: p.i });
                    const times = (runs.get(p.i) ?? 0) + 1;
                    runs.set(p.i, times);
                    if (p.wait) await sleep(1);
                    running.delete(p.key);
                    if (times === 1 && p.redo === 'giveBack') ctx.giveBack('again');
                    if (times === 1 && p.redo === 'fail') throw new Error('once');
                    done.push({ key: p.key, i: p.i });
                    finished.add(p.i);
                    return p.i;
                  },
                },
              });
            const producer = make(h.db1, 'p');
            const ids: string[] = [];
            for (const [i, w] of workload.entries()) {
              const key = `k${w.key}`;
              ids.push(
                await producer.cast(key, {
                  type: 'op',
                  payload: { key, i, redo: w.redo, wait: w.wait },
                }),
              );
            }
            await producer.close();
            const a = make(h.db1, 'a');
            const c = make(h.db2, 'b');
            try {
              // Nobody waits on these ops, so a completion by the other instance is not announced:
              // look at the board.
              const board = () => Promise.all(ids.map((id) => a.get(id)));
              await waitFor(
                async () => (await board()).every((op) => op?.status === 'succeeded'),
                20_000,
              ).catch(() => {});
              expect({ overlaps, early }).toEqual({ overlaps: 0, early: 0 });
              expect((await board()).map((op) => [op?.status, op?.result, op?.attempts])).toEqual(
                workload.map((w, i) => ['succeeded', i, w.redo === 'fail' ? 2 : 1]),
              );
              for (const [i, w] of workload.entries()) {
                expect(runs.get(i)).toBe(w.redo === 'none' ? 1 : 2);
              }
              // Per key, starts never go back to an earlier op, and completions follow the enqueue.
              const perKey = (xs: { key: string; i: number }[]) => {
                const m = new Map<string, number[]>();
                for (const x of xs) m.set(x.key, [...(m.get(x.key) ?? []), x.i]);
                return m;
              };
              for (const is of perKey(starts).values()) {
                expect(is).toEqual([...is].sort((x, y) => x - y));
              }
              for (const [key, is] of perKey(done)) {
                const enqueued = workload.flatMap((w, i) => (`k${w.key}` === key ? [i] : []));
                expect(is).toEqual(enqueued);
              }
            } finally {
              await a.close();
              await c.close();
            }
          },
        ),
        // A failing run waits out its timeouts: report the first, unshrunk.
        { numRuns: 15, endOnFailure: true },
      );
    }, 180_000);

    it('retries a failed write of an outcome while the claim is held: each op runs once', async () => {
      const name = `record${++n}`;
      const backend = sqlBackend(h.db1, { name, pollMs: 20 });
      // The database refuses the first two writes of each outcome (a restart, a dropped
      // connection): the worker keeps its claim and writes again.
      // Methods are called on the backend: a wrapper calls the original as a method.
      const succeed = backend.succeed.bind(backend);
      const fail = backend.fail.bind(backend);
      const failures = new Map<string, number>();
      const flaky = <A extends unknown[], R>(write: (...args: A) => Promise<R>) =>
        (async (...args: A) => {
          const id = (args[0] as { op: { id: string } }).op.id;
          const seen = (failures.get(id) ?? 0) + 1;
          failures.set(id, seen);
          if (seen <= 2) throw new Error('connection terminated unexpectedly');
          return write(...args);
        }) as (...args: A) => Promise<R>;
      backend.succeed = flaky(succeed);
      backend.fail = flaky(fail);
      const runs: string[] = [];
      const refused: string[] = [];
      const q = track(
        createQueue({
          backend,
          concurrency: 2,
          leaseMs: 2000,
          logger: silentLogger,
          policy: { onFailure: 'continue' },
          handlers: {
            async ok(p: string) {
              runs.push(p);
              return p;
            },
            async bad(p: string) {
              runs.push(p);
              throw new Error(`bad ${p}`);
            },
          },
        }),
      );
      q.on('op:refused', (e) => refused.push(e.id));
      expect(await q.call('k', { type: 'ok', payload: 'a' })).toBe('a');
      await expect(q.call('k', { type: 'bad', payload: 'b' })).rejects.toThrow('bad b');
      expect(await q.call('k', { type: 'ok', payload: 'c' })).toBe('c');
      expect(runs).toEqual(['a', 'b', 'c']);
      expect(refused).toEqual([]);
      expect([...failures.values()]).toEqual([3, 3, 3]);
    }, 60_000);

    it('re-claims an op whose lease expired; the stale completion is refused', async () => {
      const name = `lease${++n}`;
      const release = deferred<void>();
      const started = deferred<void>();
      const runs: string[] = [];
      // A never heartbeats in time (heartbeatMs > leaseMs): its claim expires while it runs.
      const a = track(
        createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 20 }),
          workerId: 'a',
          leaseMs: 150,
          heartbeatMs: 60_000,
          closeGraceMs: 100,
          handlers: {
            async op(_p: null, ctx: HandlerContext) {
              runs.push(`a${ctx.attempt}`);
              started.resolve();
              await release.promise;
              return 'from a';
            },
          },
        }),
      );
      const refused: string[] = [];
      a.on('op:refused', (e) => refused.push(e.id));
      const id = await a.cast('k', { type: 'op', payload: null });
      await started.promise;
      const b2 = track(
        createQueue({
          backend: sqlBackend(h.db2, { name, pollMs: 20 }),
          workerId: 'b',
          leaseMs: 5000,
          handlers: {
            async op(_p: null, ctx: HandlerContext) {
              runs.push(`b${ctx.attempt}`);
              return 'from b';
            },
          },
        }),
      );
      expect(await b2.wait(id)).toBe('from b');
      release.resolve();
      await waitFor(() => refused.length === 1);
      expect(refused).toEqual([id]);
      expect(runs).toEqual(['a1', 'b2']);
      expect(await a.get(id)).toMatchObject({ status: 'succeeded', result: 'from b', attempts: 2 });
    }, 60_000);

    it('keeps a claim alive while heartbeats hang (statements lost in a network cut)', async () => {
      const name = `hang${++n}`;
      const base = sqlBackend(h.db1, { name, pollMs: 20 });
      let beats = 0;
      const running = deferred<void>();
      // The first three heartbeats never answer, as statements sent into a network cut hang on
      // their half-open connections; the next ones go through.
      const backend = new Proxy(base, {
        get(target, prop) {
          if (prop === 'heartbeat') {
            return (...args: Parameters<typeof base.heartbeat>) =>
              ++beats <= 3 ? new Promise<never>(() => {}) : target.heartbeat(...args);
          }
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      const a = track(
        createQueue({
          backend,
          workerId: 'a',
          // A lease long enough that a loaded machine's delays cannot expire it once the hung
          // heartbeats stop counting (about a second in); far too short for the handler.
          leaseMs: 4000,
          heartbeatMs: 250,
          closeGraceMs: 100,
          handlers: {
            async op(_p: null, ctx: HandlerContext) {
              running.resolve();
              await sleep(8000); // two leases
              return `a${ctx.attempt}`;
            },
          },
        }),
      );
      const refused: string[] = [];
      a.on('op:refused', (e) => refused.push(e.id));
      const id = await a.cast('k', { type: 'op', payload: null });
      // Another worker would take the op over as soon as a's claim expired (started once a holds
      // the op: before, it could claim the op first).
      await running.promise;
      const b2 = track(
        createQueue({
          backend: sqlBackend(h.db2, { name, pollMs: 20 }),
          workerId: 'b',
          handlers: { op: () => 'from b' },
        }),
      );
      expect(await b2.wait(id)).toBe('a1');
      expect(refused).toEqual([]);
      expect(beats).toBeGreaterThan(5);
    }, 60_000);

    it("gives the handler its claim as a lease: the op's key, a higher token per claim", async () => {
      const name = `lease-ctx${++n}`;
      const seen: { key: string; token: bigint; lost: boolean }[] = [];
      const q = track(
        createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 20 }),
          handlers: {
            op(_p: null, ctx: HandlerContext) {
              const { lease } = ctx;
              seen.push({ key: lease.key, token: lease.token, lost: lease.lost.aborted });
              return lease.mode;
            },
          },
        }),
      );
      expect(await q.call('k1', { type: 'op', payload: null })).toBe('exclusive');
      await q.call('k1', { type: 'op', payload: null });
      await q.call('k2', { type: 'op', payload: null });
      expect(seen.map((s) => s.key)).toEqual(['k1', 'k1', 'k2']);
      expect(seen.some((s) => s.lost)).toBe(false);
      expect(seen[1]!.token).toBeGreaterThan(seen[0]!.token);
    }, 60_000);

    it("aborts the lease's `lost` when the claim is lost, not when the queue closes", async () => {
      const name = `lease-lost${++n}`;
      const base = sqlBackend(h.db1, { name, pollMs: 20 });
      let loseClaims = false;
      // A heartbeat that reports every claim lost once `loseClaims` is set.
      const backend = new Proxy(base, {
        get(target, prop) {
          if (prop === 'heartbeat') {
            return async (...args: Parameters<typeof base.heartbeat>) => {
              const lost = await target.heartbeat(...args);
              return loseClaims ? new Set(args[0]) : lost;
            };
          }
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      const started = deferred<void>();
      const outcomes: { signal: boolean; lost: boolean; reason?: string }[] = [];
      const q = createQueue({
        backend,
        leaseMs: 1000,
        heartbeatMs: 50,
        closeGraceMs: 50,
        handlers: {
          async op(_p: null, ctx: HandlerContext) {
            started.resolve();
            await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
            await sleep(20);
            const reason = ctx.lease.lost.reason as { code?: string } | undefined;
            outcomes.push({
              signal: ctx.signal.aborted,
              lost: ctx.lease.lost.aborted,
              ...(reason?.code ? { reason: reason.code } : {}),
            });
            return null;
          },
        },
      });
      await q.cast('closing', { type: 'op', payload: null });
      await started.promise;
      await q.close(); // the handler's signal aborts; its claim is not lost
      expect(outcomes).toEqual([{ signal: true, lost: false }]);

      const again = track(
        createQueue({
          backend,
          leaseMs: 1000,
          heartbeatMs: 50,
          handlers: {
            async op(_p: null, ctx: HandlerContext) {
              loseClaims = true;
              await new Promise((resolve) => ctx.lease.lost.addEventListener('abort', resolve));
              outcomes.push({
                signal: ctx.signal.aborted,
                lost: true,
                reason: (ctx.lease.lost.reason as { code?: string }).code!,
              });
              return null;
            },
          },
        }),
      );
      await again.cast('losing', { type: 'op', payload: null });
      await waitFor(() => outcomes.length === 2);
      expect(outcomes[1]).toEqual({ signal: true, lost: true, reason: 'async-queue.lease_lost' });
    }, 60_000);

    it('successes recorded together: each checked against its own token, one claim each', async () => {
      const backend = sqlBackend(h.db1, { name: `batch${++n}`, pollMs: 60_000 });
      await backend.attach({
        clock: systemClock,
        logger: silentLogger,
        wake: () => {},
        settled: () => {},
      });
      try {
        const first: string[] = [];
        for (const key of ['k0', 'k1', 'k2', 'k3']) {
          for (let i = 0; i < 2; i++) {
            const { op } = await backend.enqueue({ key, type: 'op', payload: i });
            if (i === 0) first.push(op.id);
          }
        }
        const opts = { workerId: 'w', maxLeaseExpiries: 5, stopOnPoison: true };
        const { claims } = await backend.claim({ ...opts, limit: 4, leaseMs: 50 });
        expect(claims.map((c) => c.op.id).sort()).toEqual([...first].sort());
        const byKey = new Map(claims.map((c) => [c.op.key, c]));
        await sleep(80);
        // k0's lease expired and another claim took it: its first claim is now stale.
        const again = await backend.claim({ ...opts, limit: 1, leaseMs: 60_000, key: 'k0' });
        expect(again.claims.map((c) => [c.op.id, c.token])).toEqual([
          [byKey.get('k0')!.op.id, byKey.get('k0')!.token + 1],
        ]);
        // A heartbeat extends the leases still held and reports the stale claim lost.
        const lost = await backend.heartbeat([...claims, again.claims[0]!], 60_000);
        expect([...lost]).toEqual([byKey.get('k0')]);
        // Issued in one turn: recorded in one batch, the stale one refused alone.
        const next = { ...opts, leaseMs: 60_000 };
        // Results travel in a text array on PostgreSQL: quotes, backslashes, braces, commas.
        const tricky = { s: 'a"b\\c{d},e NULL \u00e9' };
        const out = await Promise.all(
          ['k1', 'k0', 'k2', 'k3'].map((key) =>
            backend.succeed(byKey.get(key)!, key === 'k3' ? tricky : key, next),
          ),
        );
        expect(out.map((c) => c?.op.status)).toEqual([
          'succeeded',
          undefined,
          'succeeded',
          'succeeded',
        ]);
        const chained = out.flatMap((c) => c?.next?.claims ?? []);
        expect(out.map((c) => c?.next?.claims.length)).toEqual([1, undefined, 1, 1]);
        expect(chained.map((c) => c.op.key).sort()).toEqual(['k1', 'k2', 'k3']);
        expect(chained.every((c) => c.op.payload === 1)).toBe(true);
        expect((await backend.get(first[0]!))?.status).toBe('running');
        for (const id of first.slice(1)) expect((await backend.get(id))?.status).toBe('succeeded');
        expect((await backend.get(byKey.get('k3')!.op.id))?.result).toEqual(tricky);
        // The stale claim stays refused; the claim that replaced it is recorded.
        expect(await backend.succeed(byKey.get('k0')!, 'stale')).toBeUndefined();
        expect((await backend.succeed(again.claims[0]!, 'h.fresh'))?.op.status).toBe('succeeded');
        expect(await backend.get(first[0]!)).toMatchObject({
          status: 'succeeded',
          result: 'h.fresh',
        });
      } finally {
        await backend.close();
      }
    }, 60_000);

    it('an op whose worker keeps dying fails as poison after maxLeaseExpiries', async () => {
      const name = `poison${++n}`;
      let runs = 0;
      const q = track(
        createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 20 }),
          leaseMs: 100,
          heartbeatMs: 60_000,
          closeGraceMs: 100,
          maxLeaseExpiries: 2,
          // A real dead worker frees its slots; this one keeps hanging handlers, so give it room.
          concurrency: 3,
          handlers: {
            async hang(_p: null, ctx: HandlerContext) {
              runs++;
              await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
            },
            async ok(_p: null) {
              return 1;
            },
          },
        }),
      );
      const failed: string[] = [];
      q.on('op:failed', (e) => failed.push(`${e.id}:${e.error.code ?? ''}`));
      const id = await q.cast('p', { type: 'hang', payload: null });
      const after = await q.cast('p', { type: 'ok', payload: null });
      await expect(q.wait(id)).rejects.toMatchObject({ code: 'async-queue.op_failed' });
      expect(runs).toBe(2);
      expect(failed).toEqual([`${id}:async-queue.poison`]);
      expect((await q.get(after))?.status).toBe('cancelled');
      expect(await q.keyStatus('p')).toBe('blocked');
      expect((await q.deadLetters()).map((o) => o.id)).toEqual([id]);
    }, 60_000);

    it('a producer-only instance gets call results from a worker elsewhere', async () => {
      const name = `remote${++n}`;
      const producer = track(
        createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 20 }),
          worker: false,
          handlers: { double: async (x: number) => x * 2 },
        }),
      );
      track(
        createQueue({
          backend: sqlBackend(h.db2, { name, pollMs: 20 }),
          concurrency: 2,
          handlers: { double: async (x: number) => x * 2 },
        }),
      );
      await expect(producer.call('r', { type: 'double', payload: 21 })).resolves.toBe(42);
    }, 60_000);

    it('prunes finished ops by count and age; keeps dead letters until their age', async () => {
      const name = `retain${++n}`;
      const q = track(
        createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 20 }),
          policy: 'continue',
          concurrency: 2,
          handlers: {
            async ok(_p: null) {
              return null;
            },
            async bad(_p: null) {
              throw new Error('bad');
            },
          },
        }),
      );
      const ids: string[] = [];
      for (let i = 0; i < 6; i++)
        ids.push(await q.cast(`r${i % 2}`, { type: 'ok', payload: null }));
      const bad = await q.cast('r0', { type: 'bad', payload: null });
      await q.wait(bad).catch(() => {});
      await Promise.all(ids.map((id) => q.wait(id)));
      await sleep(5);
      expect(await q.prune({ maxCount: 2 })).toBeGreaterThanOrEqual(4);
      expect((await q.deadLetters()).map((o) => o.id)).toEqual([bad]);
      expect(await q.prune({ maxAgeMs: 0 })).toBeGreaterThanOrEqual(1);
      expect(await q.deadLetters()).toEqual([]);
    }, 60_000);
  });
}
