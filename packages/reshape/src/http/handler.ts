/**
 * The request handler: microversion, token, routing, body reading, and Placement's error body.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { positiveIntegerOption } from '@rigging/core';
import type { ReshapeStore } from '../store.js';
import { fromStoreError, HttpError, TITLES } from './errors.js';
import {
  atLeast,
  compare,
  fmt,
  MAX_MICROVERSION,
  parseVersion,
  type Version,
} from './microversion.js';
import { makeKit, type Route } from './route.js';
import { allocationRoutes } from './routes/allocations.js';
import { candidateRoutes } from './routes/candidates.js';
import { inventoryRoutes } from './routes/inventories.js';
import { providerRoutes } from './routes/providers.js';
import { reshaperRoutes } from './routes/reshaper.js';
import { resourceClassRoutes } from './routes/resource-classes.js';
import { traitRoutes } from './routes/traits.js';
import { usageRoutes } from './routes/usages.js';
import { versionDocument } from './serialize.js';

const ERROR_CODE_VERSION: Version = [1, 23];

/** Who a request is from, as decided by {@link PlacementHandlerOptions.auth}. */
export interface AuthResult {
  /** The caller's roles; every endpoint but `GET /` requires `admin`. */
  roles: string[];
}

/**
 * A request handler. `body`: the request body when a framework has already read it (a string,
 * a Buffer or parsed JSON); otherwise it is read from `req`.
 */
export type PlacementHandler = (req: IncomingMessage, res: ServerResponse, body?: unknown) => void;

/** Options of {@link createPlacementHandler}. */
export interface PlacementHandlerOptions {
  /**
   * Token check. `undefined`: no check (every request is admin). `{ token }`: requests must send
   * `x-auth-token: <token>`. `{ validate }`: called with the token; return the caller's roles,
   * or `undefined` to refuse (401). Every endpoint but `GET /` requires the `admin` role (403).
   * @default undefined
   */
  auth?:
    | {
        /** The one token accepted; a caller sending it is admin. */
        token: string;
      }
    | {
        /** Decides who sends `token`; `undefined` refuses the request (401). */
        validate(
          token: string,
          req: IncomingMessage,
        ): AuthResult | undefined | Promise<AuthResult | undefined>;
      };
  /** A prefix to strip, e.g. `/placement` when mounted there. @default '' */
  basePath?: string;
  /**
   * Build absolute URLs (the `Location` of a create) from the `X-Forwarded-Proto`,
   * `X-Forwarded-Host` and `X-Forwarded-Prefix` headers a reverse proxy sets. Turn it on only
   * behind a proxy that sets (or strips) them: otherwise any client chooses the URLs it is sent.
   * Off: the scheme is the connection's, the host the `Host` header.
   * @default false
   */
  trustForwardedHeaders?: boolean;
  /**
   * Largest accepted request body, in bytes; a larger one is answered 413 with
   * `Connection: close` (see {@link DEFAULT_MAX_BODY_BYTES}).
   * @default 4 MiB
   */
  maxBodyBytes?: number;
}

function buildRoutes(store: ReshapeStore): Route[] {
  const kit = makeKit(store);
  return [
    ...providerRoutes(kit),
    ...inventoryRoutes(kit),
    ...usageRoutes(kit),
    ...candidateRoutes(kit),
    ...allocationRoutes(kit),
    ...traitRoutes(kit),
    ...resourceClassRoutes(kit),
    ...reshaperRoutes(kit),
  ];
}

/**
 * A `(req, res)` handler serving the Placement API from `store`. Request bodies are read from
 * `req` (do not parse them before).
 */
export function createPlacementHandler(
  store: ReshapeStore,
  options: PlacementHandlerOptions = {},
): PlacementHandler {
  const base = (options.basePath ?? '').replace(/\/+$/, '');
  if (base && !base.startsWith('/'))
    throw new TypeError(`basePath must start with /, got ${JSON.stringify(options.basePath)}`);
  const maxBody = positiveIntegerOption(
    'createPlacementHandler',
    'maxBodyBytes',
    options.maxBodyBytes,
    DEFAULT_MAX_BODY_BYTES,
  );
  const trustForwarded = options.trustForwardedHeaders ?? false;
  if (typeof trustForwarded !== 'boolean')
    throw new TypeError(
      `createPlacementHandler: trustForwardedHeaders must be a boolean, got ${String(trustForwarded)}`,
    );
  const routes = buildRoutes(store);

  async function handle(
    req: IncomingMessage,
    res: ServerResponse,
    requestId: string,
    preread: unknown,
  ): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    let path = url.pathname;
    if (base) {
      if (path !== base && !path.startsWith(`${base}/`))
        throw new HttpError(404, 'The resource could not be found.');
      path = path.slice(base.length) || '/';
    }
    if (path.length > 1) path = path.replace(/\/+$/, '');
    const version = parseVersion(req);
    const headers: Record<string, string> = {};
    headers['openstack-api-version'] = `placement ${fmt(version)}`;
    headers.vary = 'openstack-api-version';
    checkContentType(req);
    const method = (req.method ?? 'GET').toUpperCase();
    if (path === '/') {
      if (method !== 'GET' && method !== 'HEAD')
        throw new HttpError(405, notAllowed(method), undefined, { allow: 'GET' });
      send(res, 200, versionDocument(base), {
        ...headers,
        ...cacheHeaders(version),
        'openstack-request-id': requestId,
      });
      return;
    }
    await authorize(options.auth, req);
    for (const route of routes) {
      const m = route.pattern.exec(path);
      if (!m) continue;
      const entry = route.methods[method];
      if (!entry) {
        throw new HttpError(405, notAllowed(method), undefined, {
          allow: Object.keys(route.methods).join(', '),
        });
      }
      if (
        (entry.min && !atLeast(version, entry.min)) ||
        (entry.max && compare(version, entry.max) > 0)
      )
        throw entry.outside === 405
          ? new HttpError(405, notAllowed(method))
          : new HttpError(404, 'The resource could not be found.');
      if (method === 'GET' && !entry.anyAccept) checkAccept(req);
      const takesBody = typeof entry.body === 'function' ? entry.body(version) : entry.body;
      const body = takesBody ? await readJson(req, preread, maxBody) : undefined;
      const params = m.slice(1).map((p) => decodeURIComponent(p));
      const reply = await entry.handler({
        req,
        version,
        params,
        query: url.searchParams,
        body,
        base,
        absolute: (p) => `${originOf(req, trustForwarded)}${base}${p}`,
      });
      // As Placement: every GET, every answer with a body (a PUT or POST answering what it
      // wrote) and PUT /traits/{name}; never a 204 of an allocation or reshaper write.
      const cached = method === 'GET' || reply.body !== undefined || entry.cacheHeaders === true;
      send(res, reply.status, reply.body, {
        ...headers,
        ...(cached ? cacheHeaders(version) : {}),
        ...reply.headers,
        'openstack-request-id': requestId,
      });
      return;
    }
    throw new HttpError(404, 'The resource could not be found.');
  }

  return (req, res, preread) => {
    const requestId = `req-${randomUUID()}`;
    handle(req, res, requestId, preread).catch((error: unknown) => {
      sendError(req, res, requestId, error);
    });
  };
}

/**
 * A `node:http` server around {@link createPlacementHandler}; call `listen()` yourself. A request
 * Node's parser refuses for a malformed `content-length` is answered as Placement does (400,
 * `content-length header must be an integer`) rather than by Node's bare 400.
 */
export function createPlacementServer(
  store: ReshapeStore,
  options: PlacementHandlerOptions = {},
): Server {
  const handler = createPlacementHandler(store, options);
  const server = createServer((req, res) => handler(req, res));
  server.on('clientError', (error: Error & { code?: string }, socket) => {
    // Only on a socket with no answer under way (as Node's own default handler decides).
    if (!socket.writable || (socket as { _httpMessage?: unknown })._httpMessage) {
      socket.destroy();
      return;
    }
    const text =
      error.code === 'HPE_INVALID_CONTENT_LENGTH' || error.code === 'HPE_UNEXPECTED_CONTENT_LENGTH'
        ? JSON.stringify({
            errors: [
              {
                status: 400,
                title: TITLES[400],
                detail: 'content-length header must be an integer',
                request_id: `req-${randomUUID()}`,
              },
            ],
          })
        : undefined;
    socket.end(
      text === undefined
        ? 'HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n'
        : `HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
    );
  });
  return server;
}

/** Placement's 405 detail. */
function notAllowed(method: string): string {
  return `The method ${method} is not allowed for this resource.`;
}

/** `cache-control` and `last-modified`, which Placement answers from microversion 1.15. */
function cacheHeaders(version: Version): Record<string, string> {
  return atLeast(version, [1, 15])
    ? { 'cache-control': 'no-cache', 'last-modified': new Date().toUTCString() }
    : {};
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string>,
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  if (body === undefined || status === 204) {
    res.statusCode = status;
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('content-type', 'application/json');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/** One value of a header sent once or several times (a proxy chain: the first, the client's). */
function firstHeader(req: IncomingMessage, name: string): string | undefined {
  const raw = req.headers[name];
  const value = Array.isArray(raw) ? raw[0] : raw;
  return value?.split(',')[0]?.trim() || undefined;
}

const HOST = /^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;
const PREFIX = /^(?:\/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+$/;

/**
 * The scheme, host and proxy prefix a client reached us at, e.g. `https://cloud.example/api`:
 * the connection's scheme and the `Host` header, or (`trustForwarded`) the `X-Forwarded-*`
 * headers. A malformed value is ignored (the socket's own address stands in for a bad `Host`).
 */
function originOf(req: IncomingMessage, trustForwarded: boolean): string {
  let scheme = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
  let host = firstHeader(req, 'host');
  let prefix = '';
  if (trustForwarded) {
    const proto = firstHeader(req, 'x-forwarded-proto')?.toLowerCase();
    if (proto === 'http' || proto === 'https') scheme = proto;
    const fhost = firstHeader(req, 'x-forwarded-host');
    if (fhost && HOST.test(fhost)) host = fhost;
    const fprefix = firstHeader(req, 'x-forwarded-prefix')?.replace(/\/+$/, '');
    if (fprefix && PREFIX.test(fprefix)) prefix = fprefix;
  }
  if (!host || !HOST.test(host)) {
    const address = req.socket.localAddress ?? '127.0.0.1';
    host = `${address.includes(':') ? `[${address}]` : address}:${req.socket.localPort ?? 80}`;
  }
  return `${scheme}://${host}${prefix}`;
}

/**
 * The default of {@link PlacementHandlerOptions.maxBodyBytes}: 4 MiB. Placement's largest real
 * requests are Nova's `POST /reshaper` and `POST /allocations`, about 350 bytes per consumer with
 * two providers: 4 MiB holds more than 10,000 consumers in one request.
 */
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

/** How much of an oversize body is read and dropped before answering 413 (past it, the answer goes at once). */
const DRAIN_BYTES = 16 * 1024 * 1024;

/**
 * The request body as text. Past `max` bytes the rest is read and dropped (up to
 * {@link DRAIN_BYTES} more), then a 413 with `Connection: close` is answered: a client that sends
 * its whole body before reading gets the answer instead of a reset connection.
 */
function readBody(req: IncomingMessage, max: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const tooLarge = () =>
      new HttpError(413, `Request body larger than ${max} bytes`, undefined, {
        connection: 'close',
      });
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= max) chunks.push(c);
      else if (chunks.length) chunks.length = 0;
      if (size > max + DRAIN_BYTES && !settled) {
        settled = true;
        reject(tooLarge());
      }
    });
    req.on('end', () => {
      if (settled) return;
      settled = true;
      if (size > max) reject(tooLarge());
      else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', (error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
  });
}

async function authorize(
  auth: PlacementHandlerOptions['auth'],
  req: IncomingMessage,
): Promise<void> {
  if (!auth) return;
  const raw = req.headers['x-auth-token'];
  const token = Array.isArray(raw) ? raw[0] : raw;
  if (!token)
    throw new HttpError(
      401,
      'This server could not verify that you are authorized to access the document you requested.',
    );
  let result: AuthResult | undefined;
  if ('token' in auth) result = token === auth.token ? { roles: ['admin'] } : undefined;
  else result = await auth.validate(token, req);
  if (!result) throw new HttpError(401, 'The request you have made requires authentication.');
  if (!result.roles.includes('admin'))
    throw new HttpError(403, 'Policy does not allow this action to be performed.');
}

/** Placement's check before routing: a request with a body must name its content type (400). */
function checkContentType(req: IncomingMessage): void {
  const length = req.headers['content-length'];
  if (length === undefined || length === '') return;
  if (!/^\d+$/.test(length.trim()))
    throw new HttpError(400, 'content-length header must be an integer');
  if (Number(length) > 0 && !req.headers['content-type'])
    throw new HttpError(400, 'content-type header required when content-length > 0');
}

/**
 * A `GET` answering JSON refuses an `accept` header that excludes it (406), as Placement's do
 * (all but `GET /traits/{name}`, which answers no body).
 */
function checkAccept(req: IncomingMessage): void {
  const accept = req.headers.accept;
  if (accept && !/application\/json|\*\/\*|application\/\*/i.test(accept))
    throw new HttpError(406, 'Only application/json is provided');
}

/** The request's JSON body: `preread` when a framework already read it, else read from `req`. */
async function readJson(req: IncomingMessage, preread: unknown, maxBody: number): Promise<unknown> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json')
    throw new HttpError(
      415,
      `The media type ${type || 'None'} is not supported, use application/json`,
    );
  if (preread !== undefined && typeof preread !== 'string' && !Buffer.isBuffer(preread))
    return preread;
  const text =
    preread === undefined ? await readBody(req, maxBody) : String(preread as string | Buffer);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, `Malformed JSON: ${(error as Error).message}`);
  }
}

/** Answers `error` with Placement's error body (a 500 for anything not an HTTP or store error). */
function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  requestId: string,
  error: unknown,
): void {
  let e: HttpError;
  let version: Version = [1, 0];
  try {
    version = parseVersion(req);
  } catch {
    // keep 1.0
  }
  if (error instanceof HttpError) e = error;
  else {
    try {
      e = fromStoreError(error);
    } catch {
      e = new HttpError(500, 'An unexpected error occurred.');
    }
  }
  if (e.status === 401) {
    // Placement's 401 comes from its auth middleware before Placement itself runs, as WebOb's
    // error body rather than Placement's error list.
    send(
      res,
      401,
      { message: e.detail, code: '401 Unauthorized', title: TITLES[401] },
      { 'openstack-request-id': requestId },
    );
    return;
  }
  const body: Record<string, unknown> = {
    status: e.status,
    title: TITLES[e.status] ?? 'Error',
    detail: e.detail,
    ...(atLeast(version, ERROR_CODE_VERSION) ? { code: e.code } : {}),
    request_id: requestId,
  };
  if (e.status === 406 && /version/i.test(e.detail)) {
    body.max_version = MAX_MICROVERSION;
    body.min_version = '1.0';
  }
  const headers = {
    ...e.headers,
    'openstack-request-id': requestId,
    vary: 'openstack-api-version',
    'openstack-api-version': `placement ${fmt(version)}`,
  };
  const type = errorType(req.headers.accept);
  if (type === 'application/json') {
    send(res, e.status, { errors: [body] }, headers);
    return;
  }
  const status = `${e.status} ${TITLES[e.status] ?? 'Error'}`;
  const text =
    type === 'text/html'
      ? `<html>\n <head>\n  <title>${status}</title>\n </head>\n <body>\n  <h1>${status}</h1>\n  ${escapeHtml(e.detail)}\n </body>\n</html>`
      : `${status}\n\n${e.detail}`;
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  res.statusCode = e.status;
  res.setHeader('content-type', `${type}; charset=UTF-8`);
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/**
 * The type of an error body, chosen by `accept` as Placement's (WebOb's) errors are: JSON when
 * `accept` is absent or `*\/*`, else the acceptable one of `text/html` and `application/json`
 * with the highest quality (`text/html` on a tie), else plain text.
 */
function errorType(accept: string | undefined): 'application/json' | 'text/html' | 'text/plain' {
  if (accept === undefined || accept.trim() === '' || accept.trim() === '*/*')
    return 'application/json';
  const offers = ['text/html', 'application/json'] as const;
  const quality = [0, 0];
  const specificity = [-1, -1];
  for (const part of accept.split(',').slice(0, 64)) {
    const [range = '', ...params] = part.split(';').map((x) => x.trim().toLowerCase());
    const q = params.find((p) => p.startsWith('q='));
    const value = q === undefined ? 1 : Number(q.slice(2));
    if (!Number.isFinite(value)) continue;
    offers.forEach((offer, i) => {
      const type = offer.split('/')[0]!;
      const level =
        range === offer ? 2 : range === `${type}/*` ? 1 : range === '*/*' ? 0 : undefined;
      if (level === undefined || level < specificity[i]!) return;
      specificity[i] = level;
      quality[i] = value;
    });
  }
  const best = quality[1]! > quality[0]! ? 1 : 0;
  return quality[best]! > 0 ? offers[best] : 'text/plain';
}

function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#x27;' })[c]!,
  );
}
