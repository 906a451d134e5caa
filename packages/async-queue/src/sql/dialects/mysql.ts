import { KEYS, OPS } from '../names.js';
import type { KeyRow, OpRow } from '../rows.js';
import type { HeldRow, KeyCount } from '../types.js';
import type { QueueDialect } from './dialect.js';

/**
 * MySQL/MariaDB: row locks with `FOR UPDATE SKIP LOCKED`, no `RETURNING` (a write is followed by
 * a read in the same transaction), no push: other processes are found by polling.
 * @internal
 */
export function mysqlDialect(): QueueDialect {
  return {
    name: 'mysql',
    defaultPollMs: 250,
    forUpdate: (query, skipLocked) =>
      skipLocked ? query.forUpdate().skipLocked() : query.forUpdate(),
    notify: async () => {},
    async upsertKey(trx, queue, key, upsert) {
      await trx.insertInto(KEYS).values(upsert.values).onDuplicateKeyUpdate(upsert.bump).execute();
      return (await trx
        .selectFrom(KEYS)
        .select(['state', 'next_seq', 'pending'])
        .where('queue', '=', queue)
        .where('op_key', '=', key)
        .executeTakeFirstOrThrow()) as KeyCount;
    },
    async claimHead(trx, queue, key, set) {
      const head = (await trx
        .selectFrom(OPS)
        .selectAll()
        .where('queue', '=', queue)
        .where('op_key', '=', key)
        .where('status', '=', 'queued')
        .orderBy('seq')
        .limit(1)
        .executeTakeFirst()) as OpRow | undefined;
      if (!head) return undefined;
      await trx.updateTable(OPS).set(set).where('id', '=', head.id).execute();
      return { ...head, ...set, attempts: Number(head.attempts) + 1 } as OpRow;
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
  };
}
