import { RiggingError } from '@rigging/core';
import type { RiggingErrorOptions } from '@rigging/core';

/** Stable codes of {@link DestroyGraphError}. */
export type DestroyGraphErrorCode =
  | 'destroy.destroyed_object'
  | 'destroy.unknown_object'
  | 'destroy.timeout'
  | 'destroy.busy'
  | 'destroy.invalid_snapshot';

/** Every error this package throws on purpose. */
export class DestroyGraphError extends RiggingError<DestroyGraphErrorCode> {
  override readonly name = 'DestroyGraphError';

  constructor(code: DestroyGraphErrorCode, message: string, options: RiggingErrorOptions = {}) {
    super(code, message, options);
  }
}
