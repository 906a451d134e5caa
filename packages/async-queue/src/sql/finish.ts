// What happens to a key when its running op ends: the next op's turn (or idle), or, when the op
// failed for good and stops the key, blocked with its queued ops cancelled. Claims (a poisoned
// op) and outcomes (a success, a failure) both end ops this way.
import type { SerializedError } from '@rigging/core';
import type { ExpressionBuilder } from '@rigging/sql';
import type { Claim, Completion } from '../backend.js';
import { sql } from '../sql-peer.js';
import type { OpInfo } from '../types.js';
import { KEYS, OPS } from './names.js';
import { QUEUED, toInfo, type Db, type OpRow } from './rows.js';
import type { QueueTables } from './tables.js';

/**
 * After the running op of `key` finished (not blocking): next op or idle. With `claim`, only
 * while that claim holds the key (fencing); false when it does not. @internal
 */
export async function advanceKey(
  tables: QueueTables,
  trx: Db,
  key: string,
  at: number,
  claim?: Claim,
): Promise<boolean> {
  const queue = tables.name;
  const { heldKeyAdvanced, keyAdvanced } = tables.statements;
  const r = claim
    ? await heldKeyAdvanced.execute(trx, { queue, key, op: claim.op.id, token: claim.token, at })
    : await keyAdvanced.execute(trx, { queue, key, at });
  return Number(r.numAffectedRows) > 0;
}

/**
 * Cancels every queued op of `key` (`cause`: the failed op's id, or `discard`) but `running`, the
 * op the key runs (its row is `queued` too: see `asRunning`). @internal
 */
export async function cancelQueued(
  tables: QueueTables,
  trx: Db,
  key: string,
  cause: string,
  at: number,
  running?: string | null,
): Promise<OpInfo[]> {
  const queued = (eb: ExpressionBuilder<any, any>) =>
    eb.and([
      eb('queue', '=', tables.name),
      eb('op_key', '=', key),
      eb('status', '=', QUEUED),
      ...(running ? [eb('id', '!=', running)] : []),
    ]);
  const rows = (await trx
    .selectFrom(OPS)
    .selectAll()
    .where(queued)
    .orderBy('seq')
    .execute()) as OpRow[];
  if (rows.length === 0) return [];
  await trx
    .updateTable(OPS)
    .set({ status: 'cancelled', cancelled_by: cause, finished_at: at })
    .where(queued)
    .execute();
  return rows.map((r) =>
    toInfo({ ...r, status: 'cancelled', cancelled_by: cause, finished_at: at }),
  );
}

/**
 * Fails `row`, the op its key runs, for good: its attempt (started at `row.started_at`) counted;
 * the key goes on (`continue`) or is blocked, its queue cancelled. @internal
 */
export async function failOp(
  tables: QueueTables,
  trx: Db,
  row: OpRow,
  error: SerializedError,
  stopKey: boolean,
  at: number,
): Promise<Completion> {
  const failed = {
    status: 'failed',
    error: JSON.stringify(error),
    finished_at: at,
    started_at: row.started_at,
  };
  await trx
    .updateTable(OPS)
    .set({ ...failed, attempts: sql<number>`attempts + 1` })
    .where('id', '=', row.id)
    .execute();
  const op = toInfo({ ...row, ...failed, attempts: Number(row.attempts) + 1 });
  if (!stopKey) {
    await advanceKey(tables, trx, row.op_key, at);
    return { op, cancelled: [], blocked: false };
  }
  const cancelled = await cancelQueued(tables, trx, row.op_key, row.id, at);
  await trx
    .updateTable(KEYS)
    .set({
      state: 'blocked',
      blocked_by: row.id,
      pending: 0,
      running_op: null,
      running_type: null,
    })
    .where('queue', '=', tables.name)
    .where('op_key', '=', row.op_key)
    .execute();
  return { op, cancelled, blocked: true };
}
