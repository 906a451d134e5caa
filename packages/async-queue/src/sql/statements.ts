// The store's hot statements: those every op runs on the transactional path (SQLite, MySQL and
// MariaDB, and PostgreSQL when it leaves its single-statement functions). Written with Kysely's
// builder and built once per backend (`prepareQuery`), then run with new values: building and
// compiling a statement costs more CPU than SQLite takes to run it.
import { prepareQuery, sql } from '../sql-peer.js';
import { heldByClaim, type ClaimFence } from './fence.js';
import { KEYS, OPS } from './names.js';
import { OP_COLUMNS, QUEUED, type OpRow } from './rows.js';

/**
 * A claimed key's fencing values (which key, its new token and lease) and the attempt's worker
 * and start time. @internal
 */
export interface KeyGrant {
  queue: string;
  key: string;
  token: number;
  leaseUntil: number;
  worker: string;
  at: number;
}

/** A key's row once its running op ended: the next op's turn, or idle. */
const nextTurn = (at: number) => ({
  state: sql<string>`case when pending > 0 then 'ready' else 'idle' end`,
  running_op: null,
  running_type: null,
  avail_at: 0,
  turn: at,
});

/** The hot statements of one backend. @internal */
export function queueStatements() {
  return {
    /** A new op's row. */
    opInserted: prepareQuery((db, row: OpRow) =>
      db.insertInto(OPS).values(Object.fromEntries(OP_COLUMNS.map((c) => [c, row[c]]))),
    ),
    /** The head op of a key: its first queued op (the one a claim of the key runs). */
    headOp: prepareQuery((db, p: { queue: string; key: string }) =>
      db
        .selectFrom(OPS)
        .selectAll()
        .where('queue', '=', p.queue)
        .where('op_key', '=', p.key)
        .where('status', '=', QUEUED)
        .orderBy('seq')
        .limit(1),
    ),
    /**
     * A key's row once its head op was claimed: running it under the claim's token and lease.
     * The op's own row is not written (see `asRunning`).
     */
    keyTaken: prepareQuery((db, p: KeyGrant & { op: string; type: string; seq: number }) =>
      db
        .updateTable(KEYS)
        .set({
          state: 'running',
          running_op: p.op,
          running_type: p.type,
          token: p.token,
          lease_until: p.leaseUntil,
          pending: sql<number>`pending - 1`,
          head_seq: p.seq,
          running_worker: p.worker,
          running_since: p.at,
        })
        .where('queue', '=', p.queue)
        .where('op_key', '=', p.key),
    ),
    /** A key's row once its running op was claimed again (an expired lease): new token, lease. */
    keyReclaimed: prepareQuery((db, p: KeyGrant) =>
      db
        .updateTable(KEYS)
        .set({
          token: p.token,
          lease_until: p.leaseUntil,
          turn: p.at,
          running_worker: p.worker,
          running_since: p.at,
        })
        .where('queue', '=', p.queue)
        .where('op_key', '=', p.key),
    ),
    /** An op's row once its success is recorded: the attempt counted, with its start and token. */
    opSucceeded: prepareQuery(
      (db, p: { id: string; result: string; at: number; startedAt: number; token: number }) =>
        db
          .updateTable(OPS)
          .set({
            status: 'succeeded',
            result: p.result,
            error: null,
            finished_at: p.at,
            attempts: sql<number>`attempts + 1`,
            started_at: p.startedAt,
            token: p.token,
          })
          .where('id', '=', p.id),
    ),
    /** The next turn of a key whose running op ended. */
    keyAdvanced: prepareQuery((db, p: { queue: string; key: string; at: number }) =>
      db
        .updateTable(KEYS)
        .set(nextTurn(p.at))
        .where('queue', '=', p.queue)
        .where('op_key', '=', p.key),
    ),
    /** The same, only while the claim that ran the op still holds the key (fencing). */
    heldKeyAdvanced: prepareQuery((db, p: ClaimFence & { at: number }) =>
      db.updateTable(KEYS).set(nextTurn(p.at)).where(heldByClaim(p)),
    ),
  };
}

/** @internal */
export type QueueStatements = ReturnType<typeof queueStatements>;
