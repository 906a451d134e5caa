// PostgreSQL: the batch of successes finds each key row by its primary key. Were it to take the
// partial index of running keys (which its "key is running" condition once matched), each
// success would read an entry per running key of the queue. Counted with PostgreSQL's own
// statistics of index scans, read once every connection of the run has closed.
import { describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import { openDatabase, sql } from '@rigging/sql';
import { freshDatabase, service } from '@rigging/testkit';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';
import { KEYS } from '../src/sql/names.js';

const status = await service('postgres');

/**
 * Index scans of each of `indexes` in database `url`, once no other session is connected to it
 * (a session flushes its statistics when it ends); fails if one stays connected.
 */
async function indexScans(url: string, indexes: string[]): Promise<Map<string, number>> {
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
      where indexrelname in (${sql.join(indexes)})`.execute(database.db);
    const scans = new Map(rows.map((r) => [r.name, Number(r.n)]));
    for (const index of indexes) {
      if (!scans.has(index)) throw new Error(`no statistics for index ${index}`);
    }
    return scans;
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
});
