import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { deferred } from '@rigging/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';
import { conformance } from './conformance.js';

const backends = await sqlBackends('async_queue');

/** Keys claimed while readers watch them; each claim meets the readers about half the time. */
const KEYS = 30;

for (const b of backends) {
  describe.skipIf(!b.available)(b.kind, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let n = 0;
    beforeAll(async () => {
      fresh = await b.create();
      database = await openDatabase(fresh.url);
    }, 60_000);
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    }, 60_000);
    conformance(
      `sql ${b.kind}`,
      async () => sqlBackend(database, { name: `q${++n}`, pollMs: 50 }),
      { slow: true },
    );

    // A key's status is read from one snapshot: while a worker claims the key's op (another
    // process's commit, as far as the reader knows), `keyStatus` and `activeKeys` show it queued
    // or in progress, never idle. Read as two statements — the key row, then its head op — a
    // claim committing between them showed a key with a running op as idle.
    it('never reads a key whose op is queued or running as idle while it is claimed', async () => {
      const release = deferred<void>();
      const started = new Set<string>();
      const worker = createQueue({
        backend: sqlBackend(database, { name: 'snap', pollMs: 5 }),
        concurrency: KEYS,
        handlers: {
          hold: async (_payload: null, ctx) => {
            started.add(ctx.key);
            await release.promise;
          },
        },
      });
      const reader = createQueue<{ hold: { payload: null; result: void } }>({
        backend: sqlBackend(database, { name: 'snap' }),
        worker: false,
        types: ['hold'],
      });
      const seen = new Map<string, string[]>();
      try {
        for (let i = 0; i < KEYS; i++) {
          const key = `k${i}`;
          await reader.cast(key, { type: 'hold', payload: null });
          const statuses: string[] = [];
          seen.set(key, statuses);
          // Two readers, each reading until the op has started and one more time after (or for
          // ten seconds at most).
          const until = Date.now() + 10_000;
          const watch = async (read: () => Promise<string>) => {
            while (Date.now() < until) {
              const before = started.has(key);
              statuses.push(await read());
              if (before) return;
              // SQLite answers without leaving the microtask queue: let the worker's timers run.
              await new Promise((resolve) => setImmediate(resolve));
            }
          };
          await Promise.all([
            watch(() => reader.keyStatus(key)),
            watch(async () => {
              const active = await reader.activeKeys();
              return active.find((a) => a.key === key)?.status ?? 'idle';
            }),
          ]);
          expect(started.has(key), `op of ${key} started`).toBe(true);
        }
      } finally {
        release.resolve();
        await worker.close();
        await reader.close();
      }
      const statuses = [...seen.values()].flat();
      // Evidence that the reads met the claims: both sides of each claim were read.
      expect(statuses.filter((s) => s === 'queued').length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s === 'hold-in-progress').length).toBeGreaterThanOrEqual(KEYS);
      const idle = [...seen].filter(([, s]) => s.includes('idle')).map(([key]) => key);
      expect(idle, 'keys read as idle while their op was queued or running').toEqual([]);
    }, 60_000);
  });
}
