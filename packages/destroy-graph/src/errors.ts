import { RiggingError } from '@rigging/core';

/** Stable codes of {@link DestroyGraphError}. */
export type DestroyGraphErrorCode =
  | 'destroy-graph.destroyed_object'
  | 'destroy-graph.unknown_object'
  | 'destroy-graph.timeout'
  | 'destroy-graph.busy'
  | 'destroy-graph.invalid_snapshot'
  | 'destroy-graph.invalid_plan';

/** Every error this package throws on purpose. */
export class DestroyGraphError extends RiggingError<DestroyGraphErrorCode> {
  override readonly name = 'DestroyGraphError';
}
