import { deferred, sleep } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue, type Queue } from '../src/index.js';
import { WAKE_DEFER_MS } from '../src/deferred-wake.js';
import { Notifier, sqlBackend } from '../src/sql.js';

// Databases without NOTIFY: an instance learns of another's work only by polling, or directly
// through a Notifier both were given. The poll interval is a minute, so only the notifier can
// connect them within the test.
const backends = await sqlBackends('async_queue_notifier', ['sqlite-file', 'mysql']);
const POLL_MS = 60_000;

for (const b of backends) {
  describe.skipIf(!b.available)(`Notifier on ${b.kind}`, () => {
    let fresh: FreshDatabase;
    let db: Database;
    let n = 0;
    const queues: Queue<any>[] = [];
    const track = <Q extends Queue<any>>(q: Q) => (queues.push(q), q);
    const pair = (notifiers: { producer?: Notifier; worker?: Notifier }) => {
      const name = `n${++n}`;
      const handlers = { double: async (x: number) => x * 2 };
      const producer = track(
        createQueue({
          backend: sqlBackend(db, { name, pollMs: POLL_MS, notifier: notifiers.producer }),
          worker: false,
          handlers,
        }),
      );
      const worker = track(
        createQueue({
          backend: sqlBackend(db, { name, pollMs: POLL_MS, notifier: notifiers.worker }),
          handlers,
        }),
      );
      return { producer, worker };
    };
    beforeAll(async () => {
      fresh = await b.create();
      db = await openDatabase(fresh.url);
    }, 60_000);
    afterAll(async () => {
      await Promise.allSettled(queues.map((q) => q.close()));
      await db?.close();
      await fresh?.drop();
    }, 60_000);

    it('a producer and a worker given one Notifier wake each other and settle the call at once', async () => {
      const notifier = new Notifier();
      const { producer, worker } = pair({ producer: notifier, worker: notifier });
      await worker.onIdle();
      await sleep(100);
      const started = Date.now();
      await expect(producer.call('k', { type: 'double', payload: 21 })).resolves.toBe(42);
      expect(Date.now() - started).toBeLessThan(POLL_MS / 4);
    }, 20_000);

    /**
     * A producer and a worker (two slots) sharing a Notifier, the worker running an op of key
     * `busy` that ends once `gate` resolves (`held`: its call).
     */
    const busyPair = async () => {
      const notifier = new Notifier();
      const name = `n${++n}`;
      const gate = deferred<void>();
      const handlers = {
        hold: async (_: null) => gate.promise.then(() => 'held'),
        double: async (x: number) => x * 2,
      };
      const backend = () => sqlBackend(db, { name, pollMs: POLL_MS, notifier });
      const producer = track(createQueue({ backend: backend(), worker: false, handlers }));
      const worker = track(createQueue({ backend: backend(), concurrency: 2, handlers }));
      await worker.onIdle();
      const running = new Promise<void>((resolve) => worker.on('op:started', () => resolve()));
      const held = producer.call('busy', { type: 'hold', payload: null });
      await running;
      return { producer, worker, gate, held };
    };

    it('a worker busy with another op takes the work it hears of after a short deferral, not at its poll', async () => {
      const { producer, gate, held } = await busyPair();
      // The worker has an op in flight and no completion to come: it claims once the wake-up's
      // deferral has run out, well before its poll.
      const started = Date.now();
      await expect(producer.call('k', { type: 'double', payload: 21 })).resolves.toBe(42);
      const ms = Date.now() - started;
      expect(ms).toBeGreaterThanOrEqual(WAKE_DEFER_MS - 5);
      expect(ms).toBeLessThan(POLL_MS / 4);
      gate.resolve();
      await expect(held).resolves.toBe('held');
    }, 20_000);

    it('work heard of while busy is taken once the busy op ends, before onIdle resolves', async () => {
      const { producer, worker, gate, held } = await busyPair();
      // Heard while busy (deferred), then the busy op ends at once: nothing is left in flight.
      const id = await producer.cast('k', { type: 'double', payload: 21 });
      gate.resolve();
      await expect(held).resolves.toBe('held');
      await worker.onIdle();
      expect((await producer.get(id))?.status).toBe('succeeded');
    }, 20_000);

    it('without a shared Notifier, instances on one Database object are not connected behind the scenes', async () => {
      const { producer, worker } = pair({});
      await worker.onIdle();
      await sleep(100);
      const id = await producer.cast('k', { type: 'double', payload: 21 });
      await sleep(1_000);
      expect((await producer.get(id))?.status).toBe('queued');
    }, 60_000);
  });
}
