import { sleep } from '@rigging/core';
import { openDatabase, sql } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { twoHandles } from './fixtures/two-handles.js';
import { createQueue, type Queue } from '../src/index.js';
import { Notifier, sqlBackend } from '../src/sql.js';

// `get(id, { waitMs })`, a long poll, across two instances that do not share a process's
// shortcuts: on PostgreSQL two connections and no shared Notifier (the end comes by NOTIFY);
// elsewhere one shared Notifier (no NOTIFY there). The producer polls once a minute, so only an
// announcement can end its wait within the test.
const backends = await sqlBackends('async_queue_long_poll', ['postgres', 'sqlite-file', 'mysql']);
const POLL_MS = 60_000;
/** The driver `@rigging/sql` loads (no types here): its clients' notifications are counted. */
const pg = ((await import('pg' as string)) as { default: { Client: { prototype: object } } })
  .default;

const handlers = {
  nap: async (ms: number) => {
    await sleep(ms);
    return ms;
  },
  // Fails after a moment: an op cast right after it is then surely queued behind it (one cast
  // after the failure would wait on a blocked key instead of being cancelled).
  fail: async (message: string): Promise<never> => {
    await sleep(200);
    throw new Error(message);
  },
};

/**
 * PostgreSQL's LISTEN sessions open in the background: waits until an announced op's end reaches
 * `producer` by NOTIFY (its wait ends after the op's 200 ms and well before `waitMs`).
 */
async function untilListening(producer: Queue<typeof handlers>): Promise<number> {
  for (let i = 1; i <= 20; i++) {
    const id = await producer.cast('warm-up', { type: 'nap', payload: 200, announce: true });
    const started = Date.now();
    const op = await producer.get(id, { waitMs: 3_000 });
    const took = Date.now() - started;
    if (op?.status === 'succeeded' && took >= 150 && took < 2_500) return i;
  }
  throw new Error('no announcement reached the producer');
}

for (const b of backends) {
  describe.skipIf(!b.available)(`get(id, { waitMs }) on ${b.kind}`, () => {
    const h = twoHandles(b);
    const { queues } = h;
    let n = 0;
    /** `workerPollMs`: how often the worker looks for work and for expired leases. */
    const pair = async ({ work = true, workerPollMs = 100 } = {}) => {
      const name = `lp${++n}`;
      const notifier = b.kind === 'postgres' ? undefined : new Notifier();
      const producer = createQueue({
        backend: sqlBackend(h.db1, { name, pollMs: POLL_MS, notifier }),
        worker: false,
        handlers,
      });
      const worker = createQueue({
        // The worker looks for work often: only the producer's learning of ends is under test.
        backend: sqlBackend(h.db2, { name, pollMs: workerPollMs, notifier }),
        worker: work,
        handlers,
      });
      queues.push(producer, worker);
      if (work && b.kind === 'postgres') await untilListening(producer);
      return { producer, worker };
    };

    it('answers once an announced op ends in the other instance, with its result', async () => {
      const { producer } = await pair();
      const id = await producer.cast('k', { type: 'nap', payload: 300, announce: true });
      const started = Date.now();
      const op = await producer.get(id, { waitMs: 30_000 });
      const took = Date.now() - started;
      expect(op).toMatchObject({ id, status: 'succeeded', result: 300 });
      expect(took).toBeGreaterThanOrEqual(250);
      expect(took).toBeLessThan(POLL_MS / 4);
    }, 60_000);

    it.runIf(b.kind === 'postgres')(
      'answers once an op ends in a batch of successes of the other instance (its one statement)',
      async () => {
        // A worker that looks for expired leases only once a minute records its successes with
        // PostgreSQL's one statement (more often, a success goes the transactional way, which
        // announces ends itself): that statement must announce the end.
        const { producer } = await pair({ workerPollMs: POLL_MS });
        const id = await producer.cast('k', { type: 'nap', payload: 300, announce: true });
        const started = Date.now();
        const op = await producer.get(id, { waitMs: 30_000 });
        expect(op).toMatchObject({ id, status: 'succeeded', result: 300 });
        expect(Date.now() - started).toBeLessThan(POLL_MS / 4);
      },
      60_000,
    );

    it('answers a failed op with its error, and a cancelled one, without rejecting', async () => {
      const { producer } = await pair();
      const failed = await producer.cast('k', { type: 'fail', payload: 'no', announce: true });
      const behind = await producer.cast('k', { type: 'nap', payload: 1, announce: true });
      await expect(producer.get(failed, { waitMs: 30_000 })).resolves.toMatchObject({
        status: 'failed',
        error: { message: 'no' },
      });
      await expect(producer.get(behind, { waitMs: 30_000 })).resolves.toMatchObject({
        status: 'cancelled',
        cancelledBy: failed,
      });
    }, 60_000);

    it('answers at once for an op that has ended, and undefined for an unknown id', async () => {
      const { producer } = await pair();
      const id = await producer.cast('k', { type: 'nap', payload: 1 });
      await expect
        .poll(() => producer.get(id).then((op) => op?.status), { timeout: 30_000 })
        .toBe('succeeded');
      const started = Date.now();
      await expect(producer.get(id, { waitMs: 30_000 })).resolves.toMatchObject({
        status: 'succeeded',
      });
      await expect(producer.get('no-such-op', { waitMs: 30_000 })).resolves.toBeUndefined();
      expect(Date.now() - started).toBeLessThan(5_000);
    }, 60_000);

    it('ends the wait with the signal (rejecting with its reason) and refuses a bad waitMs', async () => {
      const { producer } = await pair({ work: false }); // the op stays queued
      const id = await producer.cast('k', { type: 'nap', payload: 1 });
      const controller = new AbortController();
      const waiting = producer.get(id, { waitMs: 30_000, signal: controller.signal });
      setTimeout(() => controller.abort(new Error('client gone')), 100);
      await expect(waiting).rejects.toThrow('client gone');
      for (const waitMs of [-1, Number.NaN, '5' as unknown as number]) {
        await expect(producer.get(id, { waitMs })).rejects.toThrow(TypeError);
      }
      await expect(producer.get(id)).resolves.toMatchObject({ status: 'queued' });
    }, 60_000);

    it('rejects a pending long poll with async-queue.closed when its queue closes', async () => {
      const { producer } = await pair({ work: false }); // the op stays queued
      const id = await producer.cast('k', { type: 'nap', payload: 1 });
      const waiting = expect(producer.get(id, { waitMs: 30_000 })).rejects.toMatchObject({
        code: 'async-queue.closed',
      });
      await sleep(100);
      await producer.close();
      await waiting;
    }, 60_000);

    it('answers the op as it is once waitMs has passed', async () => {
      const { producer } = await pair({ work: false }); // the op stays queued
      const id = await producer.cast('k', { type: 'nap', payload: 1, announce: true });
      const started = Date.now();
      await expect(producer.get(id, { waitMs: 300 })).resolves.toMatchObject({ status: 'queued' });
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    }, 60_000);

    it.runIf(b.kind === 'postgres')(
      'queues on one Database share one LISTEN session, hearing only what they need',
      async () => {
        // A database of its own: only this test's sessions listen on it.
        const own = await b.create();
        const [dbP, dbW] = [await openDatabase(own.url), await openDatabase(own.url)];
        const sessions = async () =>
          Number(
            (
              await sql<{ n: string }>`select count(*) as n from pg_stat_activity
                where datname = current_database() and query like 'LISTEN %'`.execute(dbP.db)
            ).rows[0]!.n,
          );
        // Every notification this process's sessions are handed, by payload.
        const heard: string[] = [];
        const proto = pg.Client.prototype as unknown as {
          emit: (event: string | symbol, ...args: unknown[]) => boolean;
        };
        const emit = proto.emit;
        proto.emit = function (this: object, event, ...args) {
          if (event === 'notification')
            heard.push(String((args[0] as { payload?: string }).payload));
          return emit.call(this, event, ...args);
        };
        const pairs = [1, 2, 3].map((i) => {
          const name = `shared${i}`;
          const producer = createQueue({
            backend: sqlBackend(dbP, { name, pollMs: POLL_MS }),
            worker: false,
            handlers,
          });
          const worker = createQueue({ backend: sqlBackend(dbW, { name, pollMs: 100 }), handlers });
          return { producer, worker };
        });
        const casts = (await untilListening(pairs[0]!.producer)) + pairs.length;
        // Six queues on two Database objects: two sessions, not six.
        expect(await sessions()).toBe(2);
        await Promise.all(
          pairs.map(async ({ producer }, i) => {
            const id = await producer.cast('k', { type: 'nap', payload: 100 + i, announce: true });
            const started = Date.now();
            await expect(producer.get(id, { waitMs: 30_000 })).resolves.toMatchObject({
              status: 'succeeded',
              result: 100 + i,
            });
            expect(Date.now() - started).toBeLessThan(POLL_MS / 4);
          }),
        );
        proto.emit = emit;
        // Each end reached one session (the producers'), not the workers' too; each cast's
        // wake-up at most one (the workers'), not the producers' too.
        const ends = heard.filter((p) => p.startsWith('d:'));
        expect(ends.length).toBeGreaterThanOrEqual(casts);
        expect(new Set(ends).size).toBe(ends.length);
        expect(heard.filter((p) => p.startsWith('n:')).length).toBeLessThanOrEqual(casts);
        await Promise.all(
          pairs.flatMap(({ producer, worker }) => [producer.close(), worker.close()]),
        );
        // The last queue of each Database closed its session (the Database objects stay open).
        await expect.poll(sessions, { timeout: 10_000 }).toBe(0);
        await Promise.all([dbP.close(), dbW.close()]);
        await own.drop();
      },
      60_000,
    );

    it.runIf(b.kind === 'postgres')(
      'a producer with a short pollMs sees ends not announced at its next poll',
      async () => {
        const name = `poll${++n}`;
        // No Notifier and no announcement: only the producer's poll of waited ops can see ends.
        const producer = createQueue({
          backend: sqlBackend(h.db1, { name, pollMs: 100 }),
          worker: false,
          handlers,
        });
        const worker = createQueue({ backend: sqlBackend(h.db2, { name, pollMs: 100 }), handlers });
        queues.push(producer, worker);
        const ids = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            producer.cast(`k${i}`, { type: 'nap', payload: 100 }),
          ),
        );
        const lags = await Promise.all(
          ids.map(async (id) => {
            const op = await producer.get(id, { waitMs: 30_000 });
            expect(op).toMatchObject({ id, status: 'succeeded' });
            return Date.now() - op!.finishedAt!;
          }),
        );
        // Polls 100 ms apart: well under a second each (the wait would otherwise last 30 s).
        expect(Math.max(...lags), `lags ${lags.join(', ')} ms`).toBeLessThan(1_000);
      },
      60_000,
    );

    it.runIf(b.kind === 'postgres')(
      'sees the end of an op cast without announce only when its wait runs out',
      async () => {
        const { producer } = await pair();
        const id = await producer.cast('k', { type: 'nap', payload: 50 });
        const started = Date.now();
        // Read again as the wait ends: by then the op has long succeeded.
        await expect(producer.get(id, { waitMs: 1_500 })).resolves.toMatchObject({
          status: 'succeeded',
        });
        expect(Date.now() - started).toBeGreaterThanOrEqual(1_450);
      },
      60_000,
    );
  });
}
