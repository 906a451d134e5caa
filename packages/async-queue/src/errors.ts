import { RiggingError, type SerializedError } from '@rigging/core';

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

/**
 * The error an op's handler failed with, from what `call` or `wait` rejected with: for an
 * `async-queue.op_failed`, its `cause`. When the handler ran in this queue instance, that is the
 * very error it threw. When another instance or process ran it, the queue only has its recorded
 * form (a `SerializedError`): it comes back as a `RiggingError` with the same `code`, `message`
 * and `details` (and `name`), its causes revived the same way, so code that branches on
 * `RiggingError.hasCode(e, 'app.not_found')` works wherever the op ran. A recorded error without
 * a code comes back as an `Error` with its name and message. The other process's stack is not
 * carried over. Any other value (`op_cancelled`, a timeout, an op failed without a recorded
 * error) is returned as is.
 */
export function handlerError(error: unknown): unknown {
  if (!RiggingError.hasCode(error, 'async-queue.op_failed')) return error;
  const cause = error.cause;
  if (cause instanceof Error || RiggingError.isInstance(cause)) return cause;
  if (!isSerializedError(cause)) return error;
  return revive(cause, 0);
}

function isSerializedError(value: unknown): value is SerializedError {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { message?: unknown }).message === 'string'
  );
}

/** A recorded error as an Error again (a `RiggingError` when it has a code). */
function revive(serialized: SerializedError, depth: number): Error {
  const cause =
    depth < 8 && isSerializedError(serialized.cause)
      ? revive(serialized.cause, depth + 1)
      : undefined;
  const options = { ...(cause ? { cause } : {}) };
  const revived =
    typeof serialized.code === 'string'
      ? new RiggingError(serialized.code, serialized.message, {
          ...options,
          ...(serialized.details === undefined ? {} : { details: serialized.details }),
        })
      : new Error(serialized.message, options);
  if (typeof serialized.name === 'string' && serialized.name) {
    Object.defineProperty(revived, 'name', {
      value: serialized.name,
      writable: true,
      configurable: true,
    });
  }
  return revived;
}
