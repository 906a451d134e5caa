// PostgreSQL: the set-based claim reads a key's ops with the snapshot its statement took before
// it locked the key. A key whose head op was claimed and finished by another worker in between is
// still ready when the claim locks it, and the statement's snapshot still shows that op queued:
// the claim must leave such a key alone (picked, not claimed), never run the finished op again.
// The window is forced open: a copy of the claim function, its text the package's own, waits half
// a second after its statement began, before it locks the key.
import { openDatabase, sql } from '@rigging/sql';
import { freshDatabase, service } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { migrations, sqlBackend } from '../src/sql.js';
import { KEYS, NAMES, OPS } from '../src/sql/names.js';
import { claimSetFunction } from '../src/sql/pg-set-functions.js';

const status = await service('postgres');

interface Row {
  picked: string | null;
  id: string | null;
  token: number | null;
}

describe.skipIf(!status.available)('PostgreSQL set-based claim and its snapshot', () => {
  it('leaves a key whose head op finished after the snapshot was taken', async () => {
    const fresh = await freshDatabase('postgres', 'aq_claim_snapshot');
    const database = await openDatabase(fresh.url, { poolSize: 4 });
    const other = await openDatabase(fresh.url, { poolSize: 1 });
    try {
      await database.migrate('async-queue', migrations);
      const producer = createQueue({
        backend: sqlBackend(database, { name: 'snap' }),
        worker: false,
        handlers: { run: (_p: { n: number }) => null },
      });
      const first = await producer.cast('k', { type: 'run', payload: { n: 1 } });
      await producer.cast('k', { type: 'run', payload: { n: 2 } });
      await producer.close();

      // The package's claim under another name, waiting between its snapshot and its lock.
      const text = claimSetFunction(NAMES);
      const slow = text
        .replace(`function ${NAMES.claimSetFn}(`, 'function snap_claim(')
        .replace('k.avail_at <= p_at\n', 'k.avail_at <= p_at and snap_wait()\n');
      expect(slow).not.toBe(text);
      expect(slow).toContain('snap_wait()');
      await sql
        .raw(
          `create function snap_wait() returns boolean language sql volatile
          as $$ select pg_sleep(0.5); select true $$`,
        )
        .execute(database.db);
      await sql.raw(slow).execute(database.db);

      const now = Date.now();
      const lease = now + 60_000;
      const late = sql<Row>`select picked, id, token from snap_claim('snap', 1, ${now}::bigint,
        ${lease}::bigint, 'late')`.execute(database.db);
      // Meanwhile another worker claims the head op, runs it and records its success.
      for (let i = 0; ; i++) {
        const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
          where wait_event = 'PgSleep' and datname = current_database()`.execute(other.db);
        if (rows[0]!.n > 0) break;
        if (i === 200) throw new Error('the slow claim never reached its wait');
        await new Promise((r) => setTimeout(r, 10));
      }
      const claimed = await sql<Row>`select picked, id, token from
        ${sql.raw(NAMES.claimSetFn)}('snap', 1, ${now + 1}::bigint, ${lease}::bigint, 'quick')`.execute(
        other.db,
      );
      expect(claimed.rows).toEqual([{ picked: 'k', id: first, token: 1 }]);
      const done = await sql<{ ok: number[] | null }>`select ok from
        ${sql.raw(NAMES.succeedManySetFn)}('snap', array['k'], array[${first}]::text[],
          array[1]::integer[], array['null'], array[null]::text[], array[false],
          ${now + 2}::bigint, ${lease}::bigint, 'quick')`.execute(other.db);
      expect(done.rows[0]!.ok).toEqual([1]);

      // The slow claim locked the key as the success left it: picked, and nothing claimed.
      expect((await late).rows).toEqual([{ picked: 'k', id: null, token: null }]);
      const op = await database.db
        .selectFrom(OPS)
        .select(['status', 'attempts'])
        .where('id', '=', first)
        .executeTakeFirstOrThrow();
      expect(op).toEqual({ status: 'succeeded', attempts: 1 });
      const key = await database.db
        .selectFrom(KEYS)
        .select(['state', 'token', 'pending'])
        .where('queue', '=', 'snap')
        .where('op_key', '=', 'k')
        .executeTakeFirstOrThrow();
      expect(key).toEqual({ state: 'ready', token: 1, pending: 1 });
    } finally {
      await other.close();
      await database.close();
      await fresh.drop();
    }
  }, 30_000);
});
