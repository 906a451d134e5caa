import { RiggingError, type RiggingErrorOptions } from '@rigging/core';

/** Every error code `@rigging/locks` throws. */
export type LocksErrorCode =
  /** A wait ran past its `timeoutMs`; the message says who held the lock, where known. */
  | 'locks.timeout'
  /** A wait's `signal` aborted (also when already aborted at the call); `cause` is its reason. */
  | 'locks.aborted'
  /** A lease was lost (session gone, lease expired, lock file removed): `lease.lost.reason`. */
  | 'locks.lost'
  /** `FencingGuard.check`: a token older than one already accepted for the resource. */
  | 'locks.stale'
  /** The provider was closed with `close()`: no new grants. */
  | 'locks.closed'
  /** A lock file kept being removed or replaced while being locked. */
  | 'locks.file_replaced'
  /** `@rigging/locks/sql` was imported without its optional peer `@rigging/sql` installed. */
  | 'locks.peer_missing';

const BRAND = Symbol.for('rigging.locks.error');

/** The error of `@rigging/locks`; branch on `code` (see {@link LocksErrorCode}). */
export class LocksError extends RiggingError<LocksErrorCode> {
  override readonly name: string = 'LocksError';

  constructor(code: LocksErrorCode, message: string, options?: RiggingErrorOptions) {
    super(code, message, options);
    Object.defineProperty(this, BRAND, { value: true, enumerable: false });
  }

  /** True for a LocksError from any copy of `@rigging/locks` (unlike `instanceof`). */
  static override isInstance(error: unknown): error is LocksError {
    return (
      typeof error === 'object' &&
      error !== null &&
      (error as { [BRAND]?: unknown })[BRAND] === true
    );
  }
}
