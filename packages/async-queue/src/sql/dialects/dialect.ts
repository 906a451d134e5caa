import type { Clock } from '@rigging/core';
import type { Database, Dialect } from '@rigging/sql';
import type { Claim, EnqueueInput } from '../../backend.js';
import { sql } from '../../sql-peer.js';
import { KEYS } from '../names.js';
import type { Db } from '../rows.js';
import type {
  ClaimedRow,
  HeldRow,
  KeyCount,
  LockableQuery,
  RemoteEvents,
  SucceedItem,
} from '../types.js';

/**
 * Evidence that this process (and so its claims) is alive, which other workers can check: the
 * claim records `tag` next to the worker id. `lost` aborts when the evidence is gone (the
 * session behind it ended); the backend then makes a new one.
 * @internal
 */
export interface Presence {
  readonly tag: string;
  readonly lost: AbortSignal;
  close(): Promise<void>;
}

/** The key row of a first op, and the changes that count one more op in on an existing row. @internal */
export interface KeyUpsert {
  values: Record<string, unknown>;
  bump: Record<string, unknown>;
}

/**
 * The key row's changes when an op of `key` is counted in: one more pending op, and an idle key
 * readied with a new turn. SET expressions are ordered for MySQL, which evaluates them left to
 * right with the updated values. (The values may be a prepared query's parameters.) @internal
 */
export function keyUpsert(queue: string, key: string, at: number): KeyUpsert {
  const K = (c: string) => sql.ref(`${KEYS}.${c}`);
  const wasIdle = sql`${K('state')} = 'idle'`;
  return {
    values: { queue, op_key: key, state: 'ready', next_seq: 1, pending: 1, avail_at: 0, turn: at },
    bump: {
      next_seq: sql<number>`${K('next_seq')} + 1`,
      pending: sql<number>`${K('pending')} + 1`,
      avail_at: sql<number>`case when ${wasIdle} then 0 else ${K('avail_at')} end`,
      turn: sql<number>`case when ${wasIdle} then ${at} else ${K('turn')} end`,
      state: sql<string>`case when ${wasIdle} then 'ready' else ${K('state')} end`,
    },
  };
}

/**
 * PostgreSQL's single-statement hot paths (autocommit calls of the functions in `pg-functions.ts`
 * and `pg-set-functions.ts`). The store decides when to take them and does the rest itself.
 * @internal
 */
export interface HotPaths {
  /** Stores an op (no idempotency check); the key's state and the op's sequence number. */
  enqueue(
    db: Db,
    queue: string,
    id: string,
    input: EnqueueInput,
    payload: string,
    at: number,
  ): Promise<{ state: string; next_seq: number | string }>;
  /**
   * Claims up to `limit` ready head ops: one row per picked key. When it picked fewer keys than
   * `limit`, also the queue's next due time (as `nextDueAt` reads it; null when none), from the
   * same statement.
   */
  claim(
    db: Db,
    queue: string,
    limit: number,
    at: number,
    leaseUntil: number,
    workerId: string,
  ): Promise<{ rows: ClaimedRow[]; due?: number | null }>;
  /** Records a batch of successes (each fenced) and claims the next ops for those that ask. */
  succeedMany(
    db: Db,
    queue: string,
    items: SucceedItem[],
    at: number,
    leaseUntil: number,
    workerId: string,
  ): Promise<{ ok: number[]; rows: ClaimedRow[] }>;
}

/** A queue instance listening (see {@link QueueDialect.listen}). @internal */
export interface Listening {
  /** Resolves once it stopped listening (its signal aborted). */
  readonly done: Promise<void>;
  /**
   * From now on, hear announced ends too: resolves once they are heard (or at once while the
   * session is down: polls cover that time).
   */
  watchEnds(): Promise<void>;
}

/**
 * The pieces that differ between SQLite, PostgreSQL and MySQL/MariaDB, made by one factory per
 * dialect (`sqliteDialect()`, …): row locks, statements that need `RETURNING` (or a read-back on
 * MySQL), PostgreSQL's hot paths and `LISTEN/NOTIFY`. Each piece runs its statement on the handle
 * it is given and never calls back into the store, which owns every other statement and decides
 * when each piece is used.
 * @internal
 */
export interface QueueDialect {
  readonly name: Dialect;
  /** Polling interval when the user sets none. */
  readonly defaultPollMs: number;
  /**
   * Whether successes that finish together are shared between two statements side by side
   * (MySQL, whose statements take long enough per success for a second connection to pay).
   * PostgreSQL's one-statement batch costs so little per success that halving it costs more than
   * the second connection saves; SQLite has one writer. A batch may still start while another is
   * being recorded, with the successes that arrived meanwhile.
   */
  readonly splitBatches: boolean;
  /** Locks the rows `query` reads until the transaction ends (skipping locked ones if asked). */
  forUpdate<Q extends LockableQuery<Q>>(query: Q, skipLocked: boolean): Q;
  /**
   * Tells other processes `payload` when `trx` commits (PostgreSQL NOTIFY; elsewhere nothing):
   * on the channel of work to claim, or of announced ends.
   */
  notify(trx: Db, payload: string, channel: 'work' | 'ends'): Promise<void>;
  /** Counts an op of `key` in ({@link keyUpsert}); returns the key's state after. Locks the key row. */
  upsertKey(trx: Db, queue: string, key: string, at: number): Promise<KeyCount>;
  /**
   * Extends the lease of each claim whose key row it still holds (`held` is the fencing
   * condition) to `until`; returns the fencing fields of the rows that are held.
   */
  extendLeases(
    db: Db,
    queue: string,
    claims: readonly Claim[],
    until: number,
    held: (claims: readonly Claim[]) => any,
  ): Promise<HeldRow[]>;
  /**
   * Opens this process's {@link Presence}, and says which of the owner tags seen on running
   * claims are provably gone (their session ended, their process died): those claims are taken
   * over without waiting for their lease. Absent: only leases tell.
   */
  readonly owners?:
    | {
        presence(database: Database): Promise<Presence>;
        gone(db: Db, tags: readonly string[]): Promise<Set<string>>;
        /**
         * Read the candidate claims with a locking read (skipping locked rows): under MySQL's
         * REPEATABLE READ a plain read would fix the claim transaction's snapshot, and its later
         * plain reads (a key's head op) would miss ops enqueued since.
         */
        lockingRead?: boolean;
      }
    | undefined;
  /** The single-statement hot paths, where the dialect has them. */
  readonly hot?: HotPaths | undefined;
  /**
   * Listens for other processes' notifications until `signal` aborts (dialects that push): work
   * to claim when `work`, announced ends once `watchEnds` was called; waits between
   * reconnections on `clock`. Absent: other processes are found by polling.
   */
  listen?:
    | ((
        database: Database,
        queue: string,
        events: RemoteEvents,
        options: { work: boolean; signal: AbortSignal; clock: Clock },
      ) => Listening)
    | undefined;
}
