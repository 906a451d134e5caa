// Types the SQL backend's modules share (store, dialects, success batches): this module imports
// none of them, so that dependencies run one way.
import type { Claim, ClaimOptions, Completion } from '../backend.js';
import type { KeyRow, OpRow } from './rows.js';

/** What `claim` returns: the claims, and ops failed as poison on the way. @internal */
export interface Claimed {
  claims: Claim[];
  poisoned: Completion[];
  /** The queue's next due time, when the claim read it (see `QueueBackend.claim`). */
  due?: number | null | undefined;
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

/** The key row's state after an op was counted in. @internal */
export type KeyCount = Pick<KeyRow, 'state' | 'next_seq' | 'pending'>;

/** A key row's fencing fields, as a lease extension returns them. @internal */
export interface HeldRow {
  running_op: string;
  token: number | string;
}

/**
 * A row of the PostgreSQL claim functions: `picked` (a locked key) and its claimed head op, with
 * the claim's token and, when the op runs on its key's row, its start (`running_since`). @internal
 */
export type ClaimedRow = OpRow & { picked: string | null; running_since?: number | string };

/** A success waiting to be recorded with others that arrive meanwhile. @internal */
export interface SucceedItem {
  claim: Claim;
  result: unknown;
  /** `result` as stored (JSON). */
  text: string;
  /** Claim the next op along with this success (it takes over the slot). */
  next: ChainOptions | undefined;
  resolve: (c: Completion | undefined) => void;
  reject: (error: unknown) => void;
}

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
