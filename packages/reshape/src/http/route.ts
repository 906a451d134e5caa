/** What a route is, and the helpers every routes file shares. */
import type { IncomingMessage } from 'node:http';
import { isUuid, normalizeUuid, type ResourceProvider } from '../model.js';
import type { ReshapeStore } from '../store.js';
import { fromStoreError, GENERATION_CHANGED, HttpError, type BadRequestPrefix } from './errors.js';
import type { Version } from './microversion.js';
import { validators, type Validators } from './schemas.js';

/** One request, as a route handler sees it. @internal */
export interface Ctx {
  req: IncomingMessage;
  version: Version;
  /** The pattern's captures, URL-decoded. */
  params: string[];
  query: URLSearchParams;
  /** The parsed JSON body, for methods that take one. */
  body: unknown;
  /** The prefix the API is mounted under. */
  base: string;
  /**
   * `path` (under the mount prefix) as an absolute URL: the request's scheme, host and mount
   * prefix, as Placement builds its `Location` headers.
   */
  absolute(path: string): string;
}

/** A route handler's answer. @internal */
export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/** @internal */
export type Handler = (ctx: Ctx) => Promise<Reply>;

/**
 * A path and its methods; `min`/`max`: the microversions a method exists in (outside them: 404,
 * or `outside`); `body`: it takes a JSON body (at the microversions the function accepts, when
 * one is given); `anyAccept`: a `GET` answering no body, which
 * takes any `accept` header; `cacheHeaders`: from 1.15 it answers `cache-control` and
 * `last-modified` though it has no body (every `GET` and every answer with a body does). @internal
 */
export interface Route {
  pattern: RegExp;
  methods: Record<
    string,
    {
      min?: Version;
      max?: Version;
      outside?: 405;
      handler: Handler;
      body?: boolean | ((version: Version) => boolean);
      anyAccept?: true;
      cacheHeaders?: true;
    }
  >;
}

/** One path segment, captured. @internal */
export const SEG = '([^/]+)';

/** A microversion literal. @internal */
export const V = (a: number, b: number): Version => [a, b];

/** The store and the helpers the routes share. @internal */
export interface Kit {
  store: ReshapeStore;
  check: Validators;
  /**
   * Runs a store call, mapping its errors to HTTP ones (`bodyRefs`, `badRequest`: see
   * `fromStoreError`).
   */
  call<T>(fn: () => Promise<T>, bodyRefs?: boolean, badRequest?: BadRequestPrefix): Promise<T>;
  /** {@link Kit.call} for a write checking the provider generation: a conflict is worded as Placement's traits and aggregates writes word it. */
  callGenerationChecked<T>(fn: () => Promise<T>): Promise<T>;
  /** The provider named in a path, or a 404. */
  provider(raw: string): Promise<ResourceProvider>;
  /** A provider uuid from a path, normalized, or a 404. */
  rpUuid(raw: string): string;
}

/** @internal */
export function makeKit(store: ReshapeStore): Kit {
  const rpUuid = (raw: string): string => {
    if (!isUuid(raw)) throw new HttpError(404, `No resource provider with uuid ${raw} found`);
    return normalizeUuid(raw);
  };
  const call = async <T>(
    fn: () => Promise<T>,
    bodyRefs = false,
    badRequest?: BadRequestPrefix,
  ): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      throw fromStoreError(error, bodyRefs, badRequest);
    }
  };
  const callGenerationChecked = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      const e = fromStoreError(error);
      if (e.code === 'placement.concurrent_update')
        throw new HttpError(409, GENERATION_CHANGED, e.code);
      throw e;
    }
  };
  const provider = async (raw: string): Promise<ResourceProvider> => {
    const p = await call(() => store.getProvider(rpUuid(raw)));
    if (!p) throw new HttpError(404, `No resource provider with uuid ${raw} found`);
    return p;
  };
  return { store, check: validators(), call, callGenerationChecked, provider, rpUuid };
}
