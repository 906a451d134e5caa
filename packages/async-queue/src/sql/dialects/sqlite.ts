import { hostname } from 'node:os';
import { isProcessAlive } from '@rigging/core';
import { KEYS, OPS } from '../names.js';
import type { Db, OpRow } from '../rows.js';
import type { GrantSet, HeldRow, KeyCount } from '../types.js';
import type { KeyUpsert, QueueDialect } from './dialect.js';

/** Key upsert with INSERT … ON CONFLICT … RETURNING (SQLite ≥ 3.35, PostgreSQL). @internal */
export async function upsertKeyReturning(trx: Db, upsert: KeyUpsert): Promise<KeyCount> {
  return (await trx
    .insertInto(KEYS)
    .values(upsert.values)
    .onConflict((oc) => oc.columns(['queue', 'op_key']).doUpdateSet(upsert.bump))
    .returning(['state', 'next_seq', 'pending'])
    .executeTakeFirstOrThrow()) as KeyCount;
}

/** Claims the head op of `key` in one UPDATE … RETURNING (SQLite ≥ 3.35, PostgreSQL). @internal */
export async function claimHeadReturning(
  trx: Db,
  queue: string,
  key: string,
  set: GrantSet,
): Promise<OpRow | undefined> {
  return (await trx
    .updateTable(OPS)
    .set(set)
    .where(
      'id',
      '=',
      trx
        .selectFrom(OPS)
        .select('id')
        .where('queue', '=', queue)
        .where('op_key', '=', key)
        .where('status', '=', 'queued')
        .orderBy('seq')
        .limit(1),
    )
    .returningAll()
    .executeTakeFirst()) as OpRow | undefined;
}

/**
 * Owners on one machine: a claim records this host and pid; a claim whose pid on this host is no
 * longer alive is taken over at once (a SQLite file is shared by processes of one machine).
 */
const processOwners = {
  async presence() {
    return {
      tag: `pid:${hostname()}:${process.pid}`,
      lost: new AbortController().signal,
      close: async () => {},
    };
  },
  async gone(_db: Db, tags: readonly string[]) {
    const gone = new Set<string>();
    const here = hostname();
    for (const tag of tags) {
      const m = /^pid:(.*):(\d+)$/.exec(tag);
      if (m && m[1] === here && !isProcessAlive(Number(m[2]))) gone.add(tag);
    }
    return gone;
  },
};

/**
 * SQLite (WAL): one writer at a time, so a write transaction needs no row locks; other processes
 * on the machine are found by polling. `RETURNING` (SQLite ≥ 3.35) saves the read-backs.
 * @internal
 */
export function sqliteDialect(): QueueDialect {
  return {
    name: 'sqlite',
    defaultPollMs: 250,
    forUpdate: (query) => query,
    notify: async () => {},
    upsertKey: (trx, _queue, _key, upsert) => upsertKeyReturning(trx, upsert),
    claimHead: claimHeadReturning,
    async extendLeases(db, _queue, claims, until, held) {
      return (await db
        .updateTable(KEYS)
        .set({ lease_until: until })
        .where(held(claims))
        .returning(['running_op', 'token'])
        .execute()) as HeldRow[];
    },
    owners: processOwners,
  };
}
