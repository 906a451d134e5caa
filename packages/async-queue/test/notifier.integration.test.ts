import { sleep } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue, type Queue } from '../src/index.js';
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
