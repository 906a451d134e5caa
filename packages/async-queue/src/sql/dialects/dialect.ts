import type { Clock } from '@rigging/core';
import type { Dialect } from '@rigging/sql';
import type { Claim, ClaimOptions, Completion, EnqueueInput } from '../../backend.js';
import type { Db, KeyRow, OpRow } from '../schema.js';
import type { QueueStore } from '../store.js';
import type { SucceedItem } from '../succeed-batch.js';

/** What `claim` returns: the claims, and ops failed as poison on the way. @internal */
export interface Claimed {
  claims: Claim[];
  poisoned: Completion[];
}

/** A stored op, or the op an idempotency key already named. @internal */
export interface Enqueued {
  row: OpRow;
  created: boolean;
  /** Whether the op is held behind a blocked key; `undefined` when not known yet. */
  held?: boolean | undefined;
}

/** The claim options a chained claim (after a success) is made with. @internal */
export type ChainOptions = Omit<ClaimOptions, 'limit' | 'key'>;

/** The column values that give an op to a worker (see {@link QueueStore.grant}). @internal */
export type GrantSet = Record<string, unknown>;

/** A SELECT that can lock the rows it reads (Kysely's select builder). @internal */
export interface LockableQuery<Q> {
  forUpdate(): Q;
  skipLocked(): Q;
}

/** Wake-ups from other processes, as a dialect with push notifications delivers them. @internal */
export interface RemoteEvents {
  wake(): void;
  settled(id: string): void;
  warn(err: unknown, message: string): void;
}

/**
 * What differs between SQLite, PostgreSQL and MySQL/MariaDB for the queue: row locks, the
 * statements without `RETURNING` on MySQL, and PostgreSQL's single-statement hot paths and
 * `LISTEN/NOTIFY`. Everything else is the shared, transactional code of {@link QueueStore}.
 * @internal
 */
export interface QueueDialect {
  readonly name: Dialect;
  /** Polling interval when the user sets none. */
  readonly defaultPollMs: number;
  /** Whether wake-ups from other processes are pushed (then `listen` is called). */
  readonly pushes: boolean;
  /** Locks the rows `query` reads until the transaction ends (skipping locked ones if asked). */
  forUpdate<Q extends LockableQuery<Q>>(query: Q, skipLocked: boolean): Q;
  /** Tells other processes (PostgreSQL NOTIFY; elsewhere they poll). */
  notify(trx: Db, payload: string): Promise<void>;
  /**
   * Counts an op in on its key row (creating it, or readying an idle key) and returns the row's
   * state, next sequence number and pending count after. Locks the key row.
   */
  upsertKey(
    store: QueueStore,
    trx: Db,
    key: string,
    at: number,
  ): Promise<Pick<KeyRow, 'state' | 'next_seq' | 'pending'>>;
  /** Gives the head op of the (locked) key `k` to a worker with `set`; none when it has none. */
  claimHead(store: QueueStore, trx: Db, k: KeyRow, set: GrantSet): Promise<OpRow | undefined>;
  /** Stores an op (durably) or finds the op its idempotency key named. */
  enqueue(store: QueueStore, input: EnqueueInput, payload: string, at: number): Promise<Enqueued>;
  /** Claims up to `options.limit` ops (see `QueueBackend.claim`). */
  claim(store: QueueStore, options: ClaimOptions): Promise<Claimed>;
  /** Extends the leases of `claims` still held; returns those that are not. */
  heartbeat(store: QueueStore, claims: readonly Claim[], until: number): Promise<Set<Claim>>;
  /**
   * Records a batch of successes (each fenced by its token) and, with `next`, claims the next
   * ops for those that asked. Results in the order of `items`; `undefined` where refused.
   */
  succeedMany(
    store: QueueStore,
    items: SucceedItem[],
    next: ChainOptions | undefined,
  ): Promise<(Completion | undefined)[]>;
  /**
   * Listens for other processes' wake-ups until `signal` aborts (dialects that push); waits
   * between reconnections on `clock`.
   */
  listen(store: QueueStore, events: RemoteEvents, signal: AbortSignal, clock: Clock): Promise<void>;
}
