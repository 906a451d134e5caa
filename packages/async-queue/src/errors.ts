import { RiggingError } from '@rigging/core';

/** Every error code `@rigging/async-queue` throws or records. */
export type QueueErrorCode =
  /** `call`: the op's handler failed (after every retry); `cause` is the handler's error. */
  | 'async-queue.op_failed'
  /** `call`: the op was cancelled (an earlier op of its key failed under `stop`, or `discard`). */
  | 'async-queue.op_cancelled'
  /** The queue is closed (or closing): no new ops; waits and in-flight handlers are aborted. */
  | 'async-queue.closed'
  /** No handler is registered for the op's `type`. */
  | 'async-queue.unknown_type'
  /** The payload (or a result, on a durable backend) is not JSON. */
  | 'async-queue.not_json'
  /** An `idempotencyKey` was reused for a different key or type. */
  | 'async-queue.idempotency_conflict'
  /** The handler's claim expired (missed heartbeats) and the op may run elsewhere. */
  | 'async-queue.lease_lost'
  /** The op's lease expired too many times (its worker keeps dying): failed as poison. */
  | 'async-queue.poison'
  /** A wait (`call`, `wait`, `onIdle`) timed out. */
  | 'async-queue.timeout'
  /**
   * Importing `@rigging/async-queue/sql` without its optional peer `@rigging/sql` installed
   * (thrown as a `RiggingError` by core's peer loader, before any `QueueError` can exist).
   */
  | 'async-queue.peer_missing';

/**
 * The error `@rigging/async-queue` throws, rejects with and records; `code` says which (see
 * {@link QueueErrorCode}). Check with `RiggingError.hasCode(error, 'async-queue.op_failed')`.
 */
export class QueueError extends RiggingError<QueueErrorCode> {
  override readonly name = 'QueueError';
}
