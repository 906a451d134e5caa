import { ManualClock, silentLogger, sleep } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { freshDatabase, PG_URL, service, sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const postgres = await service('postgres');

/** Runs `text` on the server's maintenance database (not the one under test). */
async function admin(text: string): Promise<void> {
  const server = await openDatabase(PG_URL);
  try {
    await sql.raw(text).execute(server.db);
  } finally {
    await server.close();
  }
}

describe.skipIf(!postgres.available)('close() while the database is unreachable', () => {
  let fresh: FreshDatabase;
  let dbName: string;
  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'async_queue_close');
    dbName = new URL(fresh.url).pathname.slice(1);
  }, 60_000);
  afterAll(async () => {
    await admin(`alter database "${dbName}" allow_connections true`).catch(() => {});
    await fresh?.drop();
  }, 60_000);

  it('returns within a second while the LISTEN session is reconnecting', async () => {
    const database: Database = await openDatabase(fresh.url);
    try {
      const queue = createQueue({
        backend: sqlBackend(database, { name: 'outage', pollMs: 50 }),
        concurrency: 2,
        handlers: { noop: (_p: null) => null },
      });
      expect(await queue.call('k', { type: 'noop', payload: null })).toBeNull();
      // The database goes away: every connection of it is terminated and new ones are refused,
      // so the LISTEN session fails to reconnect again and again (its waits grow).
      await admin(`alter database "${dbName}" allow_connections false`);
      await admin(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${dbName}'`,
      );
      // Reconnect waits so far: 200, 400, 800, 1600 ms; the next one is 3.2 s.
      await sleep(4000);
      const t0 = performance.now();
      await queue.close();
      const closeMs = performance.now() - t0;
      expect(closeMs).toBeLessThan(1000);
    } finally {
      await admin(`alter database "${dbName}" allow_connections true`);
      await database.close();
    }
  }, 30_000);
});

const backends = await sqlBackends('async_queue_closed_pool', ['sqlite-file', 'postgres', 'mysql']);

for (const b of backends) {
  describe.skipIf(!b.available)(`close() after the database was closed, on ${b.kind}`, () => {
    it('ends the waits to retry the database at once, without throwing', async () => {
      const fresh = await b.create();
      try {
        const database = await openDatabase(fresh.url);
        // Time moves only when the test moves it: a wait that close() does not end never ends.
        const clock = new ManualClock();
        const warnings: string[] = [];
        const queue = createQueue({
          backend: sqlBackend(database, { name: 'closed', pollMs: 50 }),
          concurrency: 2,
          clock,
          logger: {
            ...silentLogger,
            warn: (...args: unknown[]) =>
              warnings.push(String(args.find((a) => typeof a === 'string'))),
          },
          handlers: { noop: (_p: null) => null },
        });
        expect(await queue.call('k', { type: 'noop', payload: null })).toBeNull();
        // On PostgreSQL this also closes the LISTEN session (closed, not lost: the listening
        // loop waits for close()).
        await database.close();
        // The worker's next look for work finds the database closed: it logs the failed claim and,
        // in the same turn, starts waiting to claim again (time stops there).
        while (!warnings.includes('async-queue claim failed; retrying')) {
          await clock.advance(50);
          await sleep(5);
        }
        const outcome = await Promise.race([
          queue.close().then(
            () => 'closed',
            (err: unknown) => err,
          ),
          sleep(1000).then(() => 'still waiting'),
        ]);
        expect(outcome).toBe('closed');
      } finally {
        await fresh.drop();
      }
    }, 30_000);
  });
}
