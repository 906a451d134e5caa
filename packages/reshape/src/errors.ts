import { RiggingError, type RiggingErrorOptions } from '@rigging/core';

/** Every error code `@rigging/reshape` throws. */
export type ReshapeErrorCode =
  | 'reshape.invalid_input'
  | 'reshape.concurrent_update'
  | 'reshape.capacity_exceeded'
  | 'reshape.invalid_allocation'
  | 'reshape.inventory_in_use'
  | 'reshape.provider_not_found'
  | 'reshape.resource_class_not_found'
  | 'reshape.resource_class_in_use'
  | 'reshape.trait_not_found'
  | 'reshape.trait_in_use'
  | 'reshape.consumer_not_found'
  | 'reshape.provider_in_use'
  | 'reshape.provider_has_children'
  | 'reshape.duplicate'
  | 'reshape.reshape_needed'
  | 'reshape.reshape_failed';

/** The error of every failed store operation; branch on `code`. */
export class ReshapeError extends RiggingError<ReshapeErrorCode> {
  override readonly name: string = 'ReshapeError';
}

/**
 * Thrown by a driver's `updateProviderTree` when the new tree needs allocations to move. At
 * startup the resource-tracker flow calls the driver again with the allocations; at any other
 * time it is fatal and propagates.
 */
export class ReshapeNeeded extends ReshapeError {
  override readonly name = 'ReshapeNeeded';
  constructor(message = 'the provider tree must be reshaped', options?: RiggingErrorOptions) {
    super('reshape.reshape_needed', message, options);
  }
}

/** The flush of a reshape failed; `cause` holds the store's error. Nothing was applied. */
export class ReshapeFailed extends ReshapeError {
  override readonly name = 'ReshapeFailed';
  constructor(message: string, options?: RiggingErrorOptions) {
    super('reshape.reshape_failed', message, options);
  }
}

/** One problem found while checking a write (see `reshapeDryRun`). */
export interface Problem {
  /** The code the write would fail with. */
  code: ReshapeErrorCode;
  /** A human-readable explanation. */
  message: string;
  /** The identifiers and figures involved (provider, consumer, resource class, amounts). */
  details: { [key: string]: string | number | null };
}

export function problemError(p: Problem): ReshapeError {
  return new ReshapeError(p.code, p.message, { details: p.details });
}
