import { createHash } from 'node:crypto';
import {
  backoffDelay,
  nonNegativeIntegerOption,
  nonNegativeOption,
  positiveOption,
  sleep,
  throwIfAborted,
  type Backoff,
} from '@rigging/core';
import type { FetchContext, FetchedPackage, PackageFetcher } from './types.js';
import { PackageCacheError } from './errors.js';
import { isSegment, type PackageRef } from './ref.js';

/** Options of {@link httpFetcher}. */
export interface HttpFetcherOptions {
  /**
   * Where a package is: a template where `{fqn}`, `{version}` and `{id}` are replaced
   * (URL-encoded), or a function of the ref.
   */
  url: string | ((ref: PackageRef) => string | URL);
  /** Extra request headers (authorization, …). */
  headers?: Record<string, string> | ((ref: PackageRef) => Record<string, string>);
  /**
   * Retries after the first attempt, for network errors, timeouts and 408/429/5xx; a body cut
   * short is resumed with `Range` + `If-Range` when the server allows it.
   * @default 3
   */
  retries?: number;
  /**
   * Delay before each retry (a `Retry-After` header, up to 30 s, takes precedence).
   * @default { initialMs: 250, factor: 2, maxMs: 30000, jitter: 0.25 }
   */
  backoff?: Backoff;
  /**
   * Shorthand for `backoff: { initialMs: retryDelayMs, factor: 2, maxMs: 30000, jitter: 0.25 }`;
   * ignored when `backoff` is given. 0 retries at once.
   * @default 250
   */
  retryDelayMs?: number;
  /**
   * Longest wait for response headers, and for each body chunk, per attempt (> 0).
   * @default 30000
   */
  timeoutMs?: number;
  /**
   * The expected SRI of a package (from your catalog). When omitted, the `integrityHeader`
   * response header is used if present.
   */
  integrity?: (ref: PackageRef) => string | undefined;
  /**
   * Response header carrying the SRI of the body.
   * @default 'x-integrity'
   */
  integrityHeader?: string;
  /**
   * When refs' ids come from {@link etagToId} (see {@link revalidate}): refuse a response whose
   * ETag does not map to `ref.id` (the package was replaced since it was resolved) with
   * `package-cache.http_error` (status 412), instead of caching new bytes under the old id.
   * @default false
   */
  matchEtag?: boolean;
  /** @default globalThis.fetch */
  fetch?: typeof globalThis.fetch;
}

const RETRYABLE = new Set([408, 425, 429, 500, 502, 503, 504]);

/**
 * The id to cache a package under for an ETag: the ETag itself when it is a safe name, else a hash.
 */
export function etagToId(etag: string): string {
  const clean = etag.replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
  if (clean.length <= 64 && isSegment(clean)) return clean;
  return `e${createHash('sha256').update(etag).digest('hex').slice(0, 32)}`;
}

function expandUrl(url: HttpFetcherOptions['url'], ref: PackageRef): string {
  if (typeof url === 'function') return String(url(ref));
  return url
    .replace(/\{fqn\}/g, encodeURIComponent(ref.fqn))
    .replace(/\{version\}/g, encodeURIComponent(ref.version))
    .replace(/\{id\}/g, encodeURIComponent(ref.id));
}

interface Settings {
  retries: number;
  /** Delay before retry `n` (from 1). */
  delay: (retry: number) => number;
  timeoutMs: number;
  fetch: typeof globalThis.fetch;
}

/**
 * Validates the retry options: `retries` an integer >= 0 (0: no retry), `retryDelayMs` >= 0 (0:
 * retry at once), `timeoutMs` > 0 (a zero timeout could never succeed).
 */
function settings(
  owner: string,
  o: {
    retries?: number | undefined;
    backoff?: Backoff | undefined;
    retryDelayMs?: number | undefined;
    timeoutMs?: number | undefined;
    fetch?: typeof globalThis.fetch | undefined;
  },
): Settings {
  const f = o.fetch ?? globalThis.fetch;
  if (typeof f !== 'function') throw new TypeError(`${owner}: no fetch implementation`);
  const initialMs = nonNegativeOption(owner, 'retryDelayMs', o.retryDelayMs, 250);
  return {
    retries: nonNegativeIntegerOption(owner, 'retries', o.retries, 3),
    delay: backoffDelay(owner, o.backoff ?? { initialMs, factor: 2, maxMs: 30_000, jitter: 0.25 }),
    timeoutMs: positiveOption(owner, 'timeoutMs', o.timeoutMs, 30_000),
    fetch: f,
  };
}

/**
 * The wait before retry `retry` (from 1): the server's `Retry-After` (≤ 30 s), else the backoff.
 */
function retryWait(s: Settings, retry: number, res?: Response): number {
  const retryAfter = res?.headers.get('retry-after');
  if (retryAfter && /^\d+$/.test(retryAfter)) return Math.min(Number(retryAfter) * 1000, 30_000);
  return s.delay(retry);
}

function timeoutError(url: string, ms: number): PackageCacheError {
  return new PackageCacheError('package-cache.timeout', `GET ${url}: no data for ${ms} ms`, {
    details: { url, timeoutMs: ms },
  });
}

function statusError(method: string, url: string, res: Response): PackageCacheError {
  return new PackageCacheError(
    'package-cache.http_error',
    `${method} ${url}: HTTP ${res.status} ${res.statusText}`,
    { details: { url, status: res.status } },
  );
}

/**
 * One request with a timeout for the headers, retried on network errors, timeouts and
 * retryable statuses. Returns the response (any non-retryable status) and an abort function
 * for the attempt's controller.
 */
async function request(
  s: Settings,
  method: string,
  url: string,
  headers: Record<string, string>,
  signal: AbortSignal | undefined,
): Promise<{ res: Response; controller: AbortController }> {
  let last: unknown;
  for (let attempt = 0; ; attempt++) {
    throwIfAborted(signal);
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(timeoutError(url, s.timeoutMs));
    }, s.timeoutMs);
    let res: Response | undefined;
    try {
      res = await s.fetch(url, { method, headers, signal: controller.signal, redirect: 'follow' });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      last = timedOut ? timeoutError(url, s.timeoutMs) : error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    if (res && !RETRYABLE.has(res.status)) return { res, controller };
    if (res) {
      last = statusError(method, url, res);
      await res.body?.cancel().catch(() => {});
    }
    if (attempt >= s.retries) {
      if (PackageCacheError.isInstance(last)) throw last;
      throw new PackageCacheError(
        'package-cache.http_error',
        `${method} ${url} failed after ${attempt + 1} attempts: ${String((last as Error)?.message ?? last)}`,
        { cause: last, details: { url } },
      );
    }
    await sleep(retryWait(s, attempt + 1, res), { signal });
  }
}

/**
 * A {@link PackageFetcher} over HTTP(S) with Node's `fetch`: retries with backoff, a timeout for
 * headers and for each chunk, resumption of a cut body (`Range` + `If-Range`), progress from
 * `Content-Length`, and integrity from your catalog or an `X-Integrity` header.
 */
export function httpFetcher(options: HttpFetcherOptions): PackageFetcher {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError('httpFetcher: options must be an object');
  }
  if (typeof options.url !== 'string' && typeof options.url !== 'function') {
    throw new TypeError(
      `httpFetcher: url must be a string or a function, got ${typeof options.url}`,
    );
  }
  const s = settings('httpFetcher', options);
  const integrityHeader = options.integrityHeader ?? 'x-integrity';
  return async (ref: PackageRef, ctx: FetchContext): Promise<FetchedPackage> => {
    const url = expandUrl(options.url, ref);
    const base = {
      ...(typeof options.headers === 'function' ? options.headers(ref) : options.headers),
    };
    const { res, controller } = await request(s, 'GET', url, base, ctx.signal);
    if (res.status !== 200) {
      await res.body?.cancel().catch(() => {});
      throw statusError('GET', url, res);
    }
    const etag = res.headers.get('etag') ?? undefined;
    if (options.matchEtag && (etag === undefined || etagToId(etag) !== ref.id)) {
      await res.body?.cancel().catch(() => {});
      throw new PackageCacheError(
        'package-cache.http_error',
        `GET ${url}: ETag ${String(etag)} does not match id ${ref.id} (the package changed)`,
        { details: { url, status: 412, etag: etag ?? null, id: ref.id } },
      );
    }
    const length = Number(res.headers.get('content-length') ?? NaN);
    const total = Number.isFinite(length) ? length : undefined;
    const integrity = options.integrity?.(ref) ?? res.headers.get(integrityHeader) ?? undefined;
    const resumable =
      etag !== undefined &&
      !etag.startsWith('W/') &&
      (res.headers.get('accept-ranges') ?? '').includes('bytes');
    return {
      integrity,
      size: total,
      stream: body(s, url, base, res, controller, { etag, resumable, total, ctx }),
    };
  };
}

async function* body(
  s: Settings,
  url: string,
  headers: Record<string, string>,
  first: Response,
  firstController: AbortController,
  o: { etag: string | undefined; resumable: boolean; total: number | undefined; ctx: FetchContext },
): AsyncGenerator<Uint8Array> {
  let res = first;
  let controller = firstController;
  let received = 0;
  let resumes = 0;
  try {
    yield* chunks();
  } finally {
    controller.abort();
  }
  async function* chunks(): AsyncGenerator<Uint8Array> {
    for (;;) {
      const reader = res.body?.getReader();
      if (!reader) return;
      try {
        for (;;) {
          let timer: NodeJS.Timeout | undefined;
          const chunk = await Promise.race([
            reader.read(),
            new Promise<never>((_, reject) => {
              timer = setTimeout(() => {
                const e = timeoutError(url, s.timeoutMs);
                controller.abort(e);
                reject(e);
              }, s.timeoutMs);
            }),
          ]).finally(() => clearTimeout(timer));
          if (chunk.done) return;
          received += chunk.value.byteLength;
          o.ctx.onProgress({ received, total: o.total });
          yield chunk.value;
        }
      } catch (error) {
        if (o.ctx.signal.aborted) throw o.ctx.signal.reason;
        if (!o.resumable || resumes >= s.retries) throw error;
        resumes++;
        await sleep(s.delay(resumes), { signal: o.ctx.signal });
        const next = await request(
          s,
          'GET',
          url,
          { ...headers, range: `bytes=${received}-`, 'if-range': o.etag! },
          o.ctx.signal,
        );
        if (next.res.status !== 206) {
          await next.res.body?.cancel().catch(() => {});
          throw error;
        }
        res = next.res;
        controller = next.controller;
      } finally {
        reader.releaseLock();
      }
    }
  }
}

/** Options of {@link revalidate}. */
export interface RevalidateOptions {
  /** The ETag you have; sent as `If-None-Match`. */
  etag?: string | undefined;
  /** Extra request headers (authorization, …). */
  headers?: Record<string, string>;
  /** @default 'HEAD' */
  method?: 'HEAD' | 'GET';
  /** @default 3 */
  retries?: number;
  /** @default { initialMs: 250, factor: 2, maxMs: 30000, jitter: 0.25 } */
  backoff?: Backoff;
  /** See {@link HttpFetcherOptions.retryDelayMs}. @default 250 */
  retryDelayMs?: number;
  /** @default 30000 */
  timeoutMs?: number;
  /** Aborts the request (and its retries); the call rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** @default globalThis.fetch */
  fetch?: typeof globalThis.fetch;
}

/** What {@link revalidate} found. */
export interface RevalidateResult {
  /** False on `304 Not Modified`: what you have is current. */
  modified: boolean;
  /** The current ETag (yours on 304). */
  etag: string | undefined;
  /** The cache id for that ETag ({@link etagToId}); undefined when the server sends no ETag. */
  id: string | undefined;
  /** The response's HTTP status (304, or a 2xx). */
  status: number;
}

/**
 * Asks the server whether a package changed (`If-None-Match`), the ETag alternative to upload
 * ids: use the returned `id` in `cache.acquire({ fqn, version, id })`, so a re-upload (new ETag)
 * becomes a new id and the outdated one is removed once nobody uses it.
 */
export async function revalidate(
  url: string,
  options: RevalidateOptions = {},
): Promise<RevalidateResult> {
  const s = settings('revalidate', options);
  const headers: Record<string, string> = { ...options.headers };
  if (options.etag) headers['if-none-match'] = options.etag;
  const method = options.method ?? 'HEAD';
  const { res } = await request(s, method, url, headers, options.signal);
  await res.body?.cancel().catch(() => {});
  if (res.status === 304) {
    const etag = res.headers.get('etag') ?? options.etag;
    return {
      modified: false,
      etag,
      id: etag === undefined ? undefined : etagToId(etag),
      status: 304,
    };
  }
  if (res.status < 200 || res.status >= 300) throw statusError(method, url, res);
  const etag = res.headers.get('etag') ?? undefined;
  return {
    modified: true,
    etag,
    id: etag === undefined ? undefined : etagToId(etag),
    status: res.status,
  };
}
