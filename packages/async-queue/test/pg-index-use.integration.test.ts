// PostgreSQL: the batch of successes finds each key row by its primary key. Were it to take the
// partial index of running keys (which its "key is running" condition once matched), each
// success would read an entry per running key of the queue. And every look for a key's queued
// ops goes through the index of queued ops, also under a prepared statement's generic plan.
// Counted with PostgreSQL's own statistics of scans, read once every connection of the run has
// closed.
import { describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import { openDatabase, sql } from '@rigging/sql';
import { freshDatabase, service } from '@rigging/testkit';
import { createQueue } from '../src/index.js';
import { migrations, sqlBackend } from '../src/sql.js';
import { KEYS, OPS } from '../src/sql/names.js';

const status = await service('postgres');

/**
 * Index scans of each of `indexes` in database `url`, once no other session is connected to it
 * (a session flushes its statistics when it ends); fails if one stays connected.
 */
async function indexScans(url: string, indexes: string[]): Promise<Map<string, number>> {
  return (await scansOf(url, indexes)).indexes;
}

/** Index scans of `indexes` and sequential scans of `table` (see {@link indexScans}). */
async function scansOf(
  url: string,
  indexes: string[],
  table?: string,
): Promise<{ indexes: Map<string, number>; table: number }> {
  const database = await openDatabase(url, { poolSize: 1 });
  try {
    for (let tries = 0; ; tries++) {
      const { rows } = await sql<{ others: number }>`
        select count(*)::int as others from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()`.execute(database.db);
      if (rows[0]!.others === 0) break;
      if (tries === 100) throw new Error(`${rows[0]!.others} session(s) still connected`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // One connection: the snapshot cleared is the one the next statement reads.
    await sql`select pg_stat_clear_snapshot()`.execute(database.db);
    const { rows } = await sql<{ name: string; n: string }>`
      select indexrelname as name, idx_scan::text as n from pg_stat_user_indexes
      where indexrelname = any(${indexes})`.execute(database.db);
    const scans = new Map(rows.map((r) => [r.name, Number(r.n)]));
    for (const index of indexes) {
      if (!scans.has(index)) throw new Error(`no statistics for index ${index}`);
    }
    if (table === undefined) return { indexes: scans, table: 0 };
    const seq = await sql<{ n: string }>`
      select seq_scan::text as n from pg_stat_user_tables where relname = ${table}`.execute(
      database.db,
    );
    if (seq.rows.length === 0) throw new Error(`no statistics for table ${table}`);
    return { indexes: scans, table: Number(seq.rows[0]!.n) };
  } finally {
    await database.close();
  }
}

describe.skipIf(!status.available)('PostgreSQL index use', () => {
  it('a batch of successes reads no entry of the index of running keys', async () => {
    const fresh = await freshDatabase('postgres', 'aq_index_use');
    try {
      const database = await openDatabase(fresh.url);
      const keys = 32;
      const gate = deferred<void>();
      const ran = new Map<string, number[]>();
      let started = 0;
      const allStarted = deferred<void>();
      const queue = createQueue({
        backend: sqlBackend(database, { name: 'index-use' }),
        concurrency: keys,
        handlers: {
          step: async (p: { n: number }, ctx) => {
            ran.set(ctx.key, [...(ran.get(ctx.key) ?? []), p.n]);
            if (++started === keys) allStarted.resolve();
            await gate.promise;
            return null;
          },
        },
      });
      const ids: string[] = [];
      for (let n = 0; n < 3; n++)
        for (let k = 0; k < keys; k++)
          ids.push(await queue.cast(`k${k}`, { type: 'step', payload: { n } }));
      // Every key runs its first op at once, then all finish together: batches of successes
      // while `keys` keys are running.
      await allStarted.promise;
      gate.resolve();
      // Each op's result (a failed op would reject).
      expect(await Promise.all(ids.map((id) => queue.wait(id)))).toEqual(ids.map(() => null));
      expect([...ran.values()].every((ns) => ns.join() === '0,1,2')).toBe(true);
      await queue.close();
      await database.close();
      // With the partial index, each of the 96 successes scanned it: 96 or more. Without, only
      // the looks for expired leases and lease extensions do, a few times in such a short run.
      // The successes found their key rows by primary key instead: the statistics counted them
      // (a count never flushed would read 0 for both).
      const [running, pk] = [`${KEYS}_running`, `${KEYS}_pk`];
      const scans = await indexScans(fresh.url, [running, pk]);
      expect(scans.get(running)).toBeLessThan(keys);
      expect(scans.get(pk)).toBeGreaterThanOrEqual(ids.length);
    } finally {
      await fresh.drop();
    }
  }, 60_000);

  it('finds queued ops by key through their index, under generic plans too', async () => {
    const fresh = await freshDatabase('postgres', 'aq_index_use');
    try {
      // Every statement of the run planned once for any parameters, as a prepared statement
      // ends up after a few runs: a partial index whose predicate is a parameter is never used.
      const name = new URL(fresh.url).pathname.slice(1);
      const admin = await openDatabase(fresh.url, { poolSize: 1 });
      await sql`alter database ${sql.id(name)} set plan_cache_mode = force_generic_plan`.execute(
        admin.db,
      );
      // The schema first: building its indexes reads the table from end to end.
      await admin.migrate('async-queue', migrations);
      await admin.close();
      const built = (await scansOf(fresh.url, [], OPS)).table;
      const database = await openDatabase(fresh.url);
      const gate = deferred<void>();
      const running = deferred<void>();
      const queue = createQueue({
        backend: sqlBackend(database, { name: 'index-use' }),
        // One slot: while the first op of `k` runs, every other op stays queued.
        concurrency: 1,
        handlers: {
          step: async (_p: number) => {
            running.resolve();
            await gate.promise;
            return null;
          },
        },
      });
      // The first claim of a worker also looks for expired leases: it claims the head op of
      // each ready key with a statement of its own.
      const ids: string[] = [];
      for (let n = 0; n < 4; n++) ids.push(await queue.cast('k', { type: 'step', payload: n }));
      await running.promise;
      const info = await queue.inspect('k');
      expect(info.running?.id).toBe(ids[0]);
      expect(info.pending.map((op) => op.id)).toEqual(ids.slice(1));
      await queue.cast('other', { type: 'step', payload: 0 });
      expect((await queue.activeKeys()).length).toBe(2);
      expect(await queue.keyStatus('k')).toBe('step-in-progress');
      expect(await queue.discard('k')).toEqual(ids.slice(1));
      gate.resolve();
      expect(await queue.wait(ids[0]!)).toBeNull();
      await queue.drained();
      await queue.close();
      await database.close();
      const queued = `${OPS}_queued`;
      const scans = await scansOf(fresh.url, [queued], OPS);
      // Claims, inspect, statuses and the discard: each found the key's queued ops by index.
      expect(scans.indexes.get(queued)).toBeGreaterThanOrEqual(5);
      expect(scans.table - built).toBe(0);
    } finally {
      await fresh.drop();
    }
  }, 60_000);
});
