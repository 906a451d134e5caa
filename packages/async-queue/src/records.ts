// What a backend and a queue report about ops and keys, and how long finished ops are kept:
// plain records that import nothing of the package, so the backend interface (`backend.ts`) and
// the queue's types (`types.ts`, which names that interface) both build on them, one way.
import type { SerializedError } from '@rigging/core';

/** Status of one op. */
export type OpStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/**
 * Status of one key: `idle` (nothing pending), `queued` (ops waiting for a worker slot),
 * `<type>-in-progress` (its head op runs, or waits for a retry), `blocked` (an op failed under
 * the `stop` policy; new ops are held until `resume` or `discard`).
 */
export type KeyStatus = 'idle' | 'queued' | 'blocked' | `${string}-in-progress`;

/** A snapshot of one op. */
export interface OpInfo {
  /** The op id. */
  id: string;
  /** The key whose ops run in order. */
  key: string;
  /** The op type (the handler's name). */
  type: string;
  /** The handler's input. */
  payload: unknown;
  /** Where the op is in its life. */
  status: OpStatus;
  /** How many times a worker started it (claims, including re-claims after a crash). */
  attempts: number;
  /** Epoch milliseconds. */
  createdAt: number;
  /** Epoch milliseconds at which the latest attempt started. */
  startedAt?: number | undefined;
  /** Epoch milliseconds at which the op succeeded, failed or was cancelled. */
  finishedAt?: number | undefined;
  /** The handler's result (`succeeded`). */
  result?: unknown;
  /** The last failure (`failed`; also kept on a `queued` op waiting for a retry). */
  error?: SerializedError | undefined;
  /** The failed op whose `stop` policy cancelled this one (`cancelled`). */
  cancelledBy?: string | undefined;
  /** The idempotency key given at enqueue, if any. */
  idempotencyKey?: string | undefined;
  /**
   * `true` when the op was accepted while its key is `blocked` (status `queued`): it is held,
   * waiting for `resume(key)` (it then runs) or `discard(key)` (it is cancelled). Absent
   * otherwise.
   */
  held?: boolean | undefined;
}

/** What `inspect(key)` returns. */
export interface KeyInfo {
  /** The key. */
  key: string;
  /** The key's status now. */
  status: KeyStatus;
  /** The failed op that blocked the key (`blocked`). */
  blockedBy?: string | undefined;
  /** The op running now, if any. */
  running?: OpInfo | undefined;
  /**
   * Ops waiting, in the order they will run. When the key is `blocked` these are the ops
   * accepted since it blocked, each with `held: true` (they wait for `resume`/`discard`).
   */
  pending: OpInfo[];
  /** How many of `pending` are held behind the block (0 unless `blocked`). */
  held?: number | undefined;
}

/** Retention of finished ops. */
export interface RetentionOptions {
  /** Keep at most this many succeeded/cancelled ops (the oldest go first). */
  maxCount?: number;
  /** Drop finished ops (failed ones included) older than this. */
  maxAgeMs?: number;
}
