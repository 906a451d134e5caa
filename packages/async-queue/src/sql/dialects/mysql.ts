import { randomUUID } from 'node:crypto';
import type { Database } from '@rigging/sql';
import { prepareQuery, sql } from '../../sql-peer.js';
import { KEYS } from '../names.js';
import type { Db, KeyRow } from '../rows.js';
import type { HeldRow, KeyCount } from '../types.js';
import { keyUpsert, type QueueDialect } from './dialect.js';

/** The named lock that stands for an owner tag (`my:<uuid>`; names are at most 64 characters). */
const ownerLock = (tag: string): string => `rigging_async_queue:${tag.slice(3)}`;

/**
 * Owners by database session: this process holds a session open, and on it a named lock
 * (`GET_LOCK`) whose name a claim records; the server frees a named lock when its session ends.
 * A claim whose lock is free (`IS_FREE_LOCK`: the process died, the connection broke) is taken
 * over at once. Unlike the process list, a named lock is visible to every account without the
 * `PROCESS` privilege. (If a live process loses that session, its claims are taken over too; its
 * heartbeat then finds them lost and aborts their handlers with `async-queue.lease_lost`.)
 */
const namedLockOwners = {
  async presence(database: Database) {
    const session = await database.session();
    try {
      const tag = `my:${randomUUID()}`;
      const { rows } = await session.query<{ ok: number | string | null }>(
        'select get_lock(?, 0) as ok',
        [ownerLock(tag)],
      );
      if (Number(rows[0]?.ok) !== 1) throw new Error(`could not take the named lock of ${tag}`);
      return { tag, lost: session.lost, close: () => session.close() };
    } catch (err) {
      await session.close().catch(() => {});
      throw err;
    }
  },
  async gone(db: Db, tags: readonly string[]) {
    const mine = tags.filter((tag) => /^my:[0-9a-f-]{36}$/.test(tag));
    const gone = new Set<string>();
    if (mine.length === 0) return gone;
    // `IS_FREE_LOCK` is 1 when no session holds the lock, 0 when one does, NULL on an error
    // (counted as alive).
    const { rows } = await sql<Record<string, number | string | null>>`select ${sql.join(
      mine.map((tag, i) => sql`is_free_lock(${ownerLock(tag)}) as ${sql.ref(`f${i}`)}`),
    )}`.execute(db);
    const row = rows[0] ?? {};
    mine.forEach((tag, i) => {
      if (Number(row[`f${i}`]) === 1) gone.add(tag);
    });
    return gone;
  },
  lockingRead: true,
};

/**
 * MySQL/MariaDB: row locks with `FOR UPDATE SKIP LOCKED`, no `RETURNING` (a write is followed by
 * a read in the same transaction), no push: other processes are found by polling; owners are
 * known gone by their session's named lock.
 * @internal
 */
export function mysqlDialect(): QueueDialect {
  // The hot statements, built once for this dialect instance (`prepareQuery`).
  const keyCountedIn = prepareQuery((db, p: { queue: string; key: string; at: number }) => {
    const upsert = keyUpsert(p.queue, p.key, p.at);
    return db.insertInto(KEYS).values(upsert.values).onDuplicateKeyUpdate(upsert.bump);
  });
  const keyCount = prepareQuery((db, p: { queue: string; key: string }) =>
    db
      .selectFrom(KEYS)
      .select(['state', 'next_seq', 'pending'])
      .where('queue', '=', p.queue)
      .where('op_key', '=', p.key),
  );
  return {
    name: 'mysql',
    defaultPollMs: 250,
    splitBatches: true,
    forUpdate: (query, skipLocked) =>
      skipLocked ? query.forUpdate().skipLocked() : query.forUpdate(),
    notify: async () => {},
    async upsertKey(trx, queue, key, at) {
      await keyCountedIn.execute(trx, { queue, key, at });
      const { rows } = await keyCount.execute(trx, { queue, key });
      return rows[0] as KeyCount;
    },
    /** One statement per claim: without `RETURNING`, a batch could not tell which rows held. */
    async extendLeases(db, queue, claims, until, held) {
      const out: HeldRow[] = [];
      for (const c of claims) {
        const r = await db
          .updateTable(KEYS)
          .set({ lease_until: until })
          .where(held([c]))
          .executeTakeFirst();
        if (Number(r.numUpdatedRows) > 0) {
          out.push({ running_op: c.op.id, token: c.token });
          continue;
        }
        // MySQL reports 0 changed rows when the value did not change: read the row back.
        const k = (await db
          .selectFrom(KEYS)
          .select(['running_op', 'token', 'state'])
          .where('queue', '=', queue)
          .where('op_key', '=', c.op.key)
          .executeTakeFirst()) as Pick<KeyRow, 'running_op' | 'token' | 'state'> | undefined;
        if (k?.state === 'running' && k.running_op !== null) {
          out.push({ running_op: k.running_op, token: k.token });
        }
      }
      return out;
    },
    owners: namedLockOwners,
  };
}
