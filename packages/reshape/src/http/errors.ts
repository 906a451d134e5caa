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
 * How a route words its 400s: the text Placement's handler puts before the error, per store
 * error (e.g. `Unable to create inventory for resource provider …: `). @internal
 */
export type BadRequestPrefix = (error: RiggingError) => string;

/**
 * Maps a store error to an HTTP error; `bodyRefs`: unknown providers named in a body are 400
 * (`Allocation for resource provider '…' that does not exist.`); `badRequest`: the prefix of
 * the route's other 400s. Anything else is rethrown. @internal
 */
export function fromStoreError(
  error: unknown,
  bodyRefs = false,
  badRequest?: BadRequestPrefix,
): HttpError {
  if (!RiggingError.isInstance(error)) throw error;
  const mapped = CODE_MAP[error.code as ReshapeErrorCode];
  if (!mapped) throw error;
  const [status, code] = mapped;
  if (bodyRefs && error.code === 'reshape.provider_not_found') {
    const uuid = (error.details as { uuid?: unknown } | undefined)?.uuid;
    return new HttpError(
      400,
      typeof uuid === 'string'
        ? `Allocation for resource provider '${uuid}' that does not exist.`
        : error.message,
      code,
    );
  }
  const detail = placementDetail(error);
  return new HttpError(
    status,
    status === 400 && badRequest ? `${badRequest(error)}${detail}` : detail,
    code,
  );
}

/**
 * The detail Placement answers for a store error, where clients or Placement's own tests look
 * for its words (a generation conflict, a refused allocation); the store's message otherwise.
 */
function placementDetail(error: RiggingError): string {
  const d = (error.details ?? {}) as Record<string, unknown>;
  const shown = (v: unknown) => (v === null || v === undefined ? 'null' : String(v as number));
  switch (error.code) {
    case 'reshape.concurrent_update':
      // Placement compares the stored generation ("expected") with the request's ("got").
      // (Python's `None` when the request said null of a consumer that exists).
      if (d.entity === 'consumer')
        return `consumer generation conflict - expected ${shown(d.actual)} but got ${d.actual == null ? shown(d.expected) : d.expected == null ? 'None' : shown(d.expected)}`;
      if (d.entity === 'provider')
        return `resource provider generation conflict - actual: ${shown(d.actual)}, given: ${shown(d.expected)}`;
      return error.message;
    case 'reshape.capacity_exceeded':
      return typeof d.resourceClass === 'string' && typeof d.uuid === 'string'
        ? `Unable to allocate inventory: Unable to create allocation for '${d.resourceClass}' on resource provider '${d.uuid}'. The requested amount would exceed the capacity.`
        : `Unable to allocate inventory: ${error.message}`;
    case 'reshape.invalid_allocation':
      if (typeof d.resourceClass === 'string' && typeof d.uuid === 'string')
        return d.minUnit === undefined && d.maxUnit === undefined
          ? `Unable to allocate inventory: Inventory for '${d.resourceClass}' on resource provider '${d.uuid}' invalid.`
          : `Unable to allocate inventory: Unable to create allocation for '${d.resourceClass}' on resource provider '${d.uuid}'. The requested amount would violate inventory constraints.`;
      return `Unable to allocate inventory: ${error.message}`;
    case 'reshape.resource_class_not_found':
      return typeof d.resourceClass === 'string' && /does not exist/.test(error.message)
        ? `No such resource class ${d.resourceClass}.`
        : error.message;
    case 'reshape.provider_not_found':
      return typeof d.uuid === 'string'
        ? `No resource provider with uuid ${d.uuid} found`
        : error.message;
    case 'reshape.invalid_input':
      // A provider moved under itself or one of its descendants.
      if (typeof d.uuid === 'string' && typeof d.parent === 'string')
        return `Unable to save resource provider ${d.uuid}: Object action update failed because: creating loop in the provider tree is not allowed.`;
      if (typeof d.resourceClass === 'string' && typeof d.reserved === 'number')
        return `Invalid inventory for '${d.resourceClass}'. The reserved value is greater than total.`;
      // A resource class name neither standard nor custom: Placement knows no such class.
      if (typeof d.resourceClass === 'string') return `No such resource class ${d.resourceClass}.`;
      return error.message;
    case 'reshape.resource_class_in_use':
      return typeof d.resourceClass === 'string'
        ? `Error in delete resource class: Cannot delete resource class ${d.resourceClass}. Class is in use in inventory.`
        : error.message;
    case 'reshape.inventory_in_use':
      return typeof d.resourceClass === 'string' && typeof d.uuid === 'string'
        ? `Inventory for '${d.resourceClass}' on resource provider '${d.uuid}' in use.`
        : error.message;
    case 'reshape.duplicate':
      if (typeof d.uuid === 'string' && d.name === undefined)
        return `Conflicting resource provider uuid: ${d.uuid} already exists.`;
      if (typeof d.name === 'string' && d.uuid === undefined)
        return `Conflicting resource provider name: ${d.name} already exists.`;
      return `Conflicting resource provider: ${error.message}`;
    case 'reshape.provider_in_use':
      return `Unable to delete resource provider ${String(d.uuid as string)}: Resource provider has allocations.`;
    case 'reshape.provider_has_children':
      return `Unable to delete parent resource provider ${String(d.uuid as string)}: It has child resource providers.`;
    default:
      return error.message;
  }
}

/**
 * Placement's 409 when `PUT …/traits` or `PUT …/aggregates` names a stale provider generation.
 * @internal
 */
export const GENERATION_CHANGED =
  "Resource provider's generation already changed. Please update the generation and try again.";
