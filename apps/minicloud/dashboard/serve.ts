/**
 * Node-side helpers for serving the dashboard, for `minicloud serve` and the fixture server:
 * - {@link serveStatic}: serve the built `dist/` directory with correct content types.
 * - {@link DashboardHub}: hold the current {@link DashboardState}, apply published events, and
 *   stream them to every `GET /api/events` client (snapshot first, then increments).
 *
 * Both take plain `node:http` request/response objects. With Fastify, use `reply.hijack()` and
 * pass `request.raw` / `reply.raw`.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { applyEvent, emptyState, formatSse } from '../src/wire.js';
import type { DashboardEvent, DashboardState } from '../src/wire.js';

/** Where `vite build` puts the dashboard (this directory's `dist/`). */
export const defaultDistDir: string = fileURLToPath(new URL('./dist/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};

/** Content type for a file name (by extension); `application/octet-stream` when unknown. */
export function contentType(file: string): string {
  return CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream';
}

export interface ServeStaticOptions {
  /**
   * URL prefix the dashboard is mounted at.
   * @default '/'
   */
  prefix?: string;
}

/**
 * Returns a handler that serves `GET`/`HEAD` requests for files under `distDir` (`/` →
 * `index.html`). It resolves `true` when it answered, `false` when the request is not for one
 * of its files (wrong method, outside the prefix, missing file), so the caller can go on.
 * Hashed files under `assets/` are sent as immutable; `index.html` as `no-cache`.
 */
export function serveStatic(
  distDir: string = defaultDistDir,
  options: ServeStaticOptions = {},
): (req: IncomingMessage, res: ServerResponse) => Promise<boolean> {
  const root = resolve(distDir);
  const prefix = (options.prefix ?? '/').replace(/\/?$/, '/');
  return async (req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') return false;
    const url = new URL(req.url ?? '/', 'http://localhost');
    let path: string;
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      return false;
    }
    if (`${path}/` === prefix) path = prefix;
    if (!path.startsWith(prefix)) return false;
    let rel = path.slice(prefix.length);
    if (rel === '' || rel.endsWith('/')) rel += 'index.html';
    const file = resolve(join(root, rel));
    if (file !== root && !file.startsWith(root + sep)) return false;
    let size: number;
    try {
      const s = await stat(file);
      if (!s.isFile()) return false;
      size = s.size;
    } catch {
      return false;
    }
    res.statusCode = 200;
    res.setHeader('content-type', contentType(file));
    res.setHeader('content-length', size);
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader(
      'cache-control',
      rel.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
    );
    if (req.method === 'HEAD') {
      res.end();
      return true;
    }
    await new Promise<void>((done) => {
      const stream = createReadStream(file);
      stream.on('error', () => {
        res.destroy();
        done();
      });
      res.on('close', () => {
        stream.destroy();
        done();
      });
      stream.pipe(res);
    });
    return true;
  };
}

/** Bytes an event-stream client may leave unread before it is disconnected. */
const MAX_BUFFERED_BYTES = 1024 * 1024;

export interface DashboardHubOptions {
  /** @default emptyState() */
  initial?: DashboardState;
  /**
   * Interval of SSE comment pings that keep proxies from closing idle streams.
   * @default 15000
   */
  heartbeatMs?: number;
  /**
   * Most event-stream clients at once; one more is answered 503 with
   * `{ error: { code: 'minicloud.too_many_streams' } }` and closed.
   * @default 100
   */
  maxClients?: number;
}

/**
 * The server half of `GET /api/events`: keeps the current state (by applying every published
 * event with the same reducer the page uses) and fans events out to connected clients.
 */
export class DashboardHub {
  #state: DashboardState;
  readonly #clients = new Set<ServerResponse>();
  readonly #heartbeat: ReturnType<typeof setInterval>;
  readonly #maxClients: number;

  constructor(options: DashboardHubOptions = {}) {
    this.#state = options.initial ?? emptyState();
    const max = options.maxClients ?? 100;
    if (!Number.isInteger(max) || max < 1) {
      throw new TypeError(`DashboardHub: maxClients must be an integer >= 1, got ${String(max)}`);
    }
    this.#maxClients = max;
    this.#heartbeat = setInterval(() => {
      for (const c of this.#clients) c.write(': ping\n\n');
    }, options.heartbeatMs ?? 15_000);
    this.#heartbeat.unref();
  }

  /** The state after every event published so far. */
  get state(): DashboardState {
    return this.#state;
  }

  /** Number of connected event-stream clients. */
  get clients(): number {
    return this.#clients.size;
  }

  /** Apply an event to the state and send it to every client. */
  publish(event: DashboardEvent): void {
    this.#state = applyEvent(this.#state, event);
    const message = formatSse(event);
    for (const c of this.#clients) {
      // A client that does not read would make the server buffer without bound: drop it (a
      // browser reconnects and gets a fresh snapshot).
      if (c.writableLength > MAX_BUFFERED_BYTES) {
        this.#clients.delete(c);
        c.destroy();
      } else c.write(message);
    }
  }

  /**
   * Answer `GET /api/events`: headers, a `snapshot`, then every later event until close; 503
   * (`minicloud.too_many_streams`) when `maxClients` streams are open already.
   */
  handle(req: IncomingMessage, res: ServerResponse): void {
    if (this.#clients.size >= this.#maxClients) {
      res
        .writeHead(503, { 'content-type': 'application/json; charset=utf-8', 'retry-after': '5' })
        .end(
          JSON.stringify({
            error: {
              code: 'minicloud.too_many_streams',
              message: `${this.#maxClients} event streams are open already; retry later`,
            },
          }),
        );
      return;
    }
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write('retry: 2000\n\n');
    res.write(formatSse({ type: 'snapshot', state: this.#state }));
    this.#clients.add(res);
    const drop = () => this.#clients.delete(res);
    req.on('close', drop);
    res.on('close', drop);
  }

  /** End every open stream; browsers reconnect (after the `retry` delay) and get a fresh snapshot. */
  disconnect(): void {
    for (const c of this.#clients) c.end();
    this.#clients.clear();
  }

  /** End every stream and stop the heartbeat (on server shutdown). */
  close(): void {
    clearInterval(this.#heartbeat);
    this.disconnect();
  }
}
