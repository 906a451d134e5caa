/** HTTP errors and how store errors map to Placement's statuses and error codes. */
import { RiggingError } from '@rigging/core';
import type { ReshapeErrorCode } from '../errors.js';

/** An error answered with `status` and Placement's error body. @internal */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly code = 'placement.undefined_code',
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
  }
}

/** Titles of the statuses answered. @internal */
export const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  409: 'Conflict',
  413: 'Request Entity Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
};

const CODE_MAP: Partial<Record<ReshapeErrorCode, [number, string]>> = {
  'reshape.invalid_input': [400, 'placement.undefined_code'],
  'reshape.concurrent_update': [409, 'placement.concurrent_update'],
  'reshape.capacity_exceeded': [409, 'placement.undefined_code'],
  'reshape.invalid_allocation': [409, 'placement.undefined_code'],
  'reshape.inventory_in_use': [409, 'placement.inventory.inuse'],
  'reshape.provider_not_found': [404, 'placement.undefined_code'],
  'reshape.resource_class_not_found': [400, 'placement.undefined_code'],
  'reshape.resource_class_in_use': [409, 'placement.undefined_code'],
  'reshape.trait_not_found': [400, 'placement.undefined_code'],
  'reshape.trait_in_use': [409, 'placement.undefined_code'],
  'reshape.consumer_not_found': [404, 'placement.undefined_code'],
  'reshape.provider_in_use': [409, 'placement.resource_provider.inuse'],
  'reshape.provider_has_children': [409, 'placement.resource_provider.cannot_delete_parent'],
  'reshape.duplicate': [409, 'placement.duplicate_name'],
};

/**
 * Maps a store error to an HTTP error; `bodyRefs`: unknown providers named in a body are 400.
 * Anything else is rethrown. @internal
 */
export function fromStoreError(error: unknown, bodyRefs = false): HttpError {
  if (!RiggingError.isInstance(error)) throw error;
  const mapped = CODE_MAP[error.code as ReshapeErrorCode];
  if (!mapped) throw error;
  const [status, code] = mapped;
  const body = bodyRefs && error.code === 'reshape.provider_not_found';
  return new HttpError(body ? 400 : status, error.message, code);
}
