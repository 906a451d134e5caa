/**
 * A tiny stand-in for `minicloud serve` (development and browser tests): serves `dist/`, streams
 * the scripted story of ./fixture-scenario.ts on `GET /api/events`, and accepts
 * `POST /api/queues/:key/resume` (drains the blocked key) and `/discard` (drops its pending ops).
 *
 * Run it: `npx tsx dashboard/test/fixture-server.ts [--port 8787] [--step-ms 400]` from
 * apps/minicloud, after `npx vite build dashboard`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { DashboardHub, defaultDistDir, serveStatic } from '../serve.js';
import type { ApiError, DashboardState } from '../../src/wire.js';
import { initialState, resumeSteps, scenario, type Step } from './fixture-scenario.js';

export interface FixtureServerOptions {
  /** @default 0 (a free port) */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default defaultDistDir (dashboard/dist) */
  distDir?: string;
  /**
   * Milliseconds per scenario tick.
   * @default 400
   */
  stepMs?: number;
  /**
   * When the story starts: on the first `/api/events` client, or only via `start()`.
   * @default 'first-client'
   */
  autoStart?: 'first-client' | 'manual';
}

export interface FixtureServer {
  url: string;
  port: number;
  hub: DashboardHub;
  /** Start the scripted story (idempotent). */
  start(): void;
  /** Resolves when the main story has been fully published. */
  finished: Promise<void>;
  state(): DashboardState;
  close(): Promise<void>;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function apiError(res: ServerResponse, status: number, code: string, message: string): void {
  const body: ApiError = { error: { code, message } };
  sendJson(res, status, body);
}

export async function startFixtureServer(
  options: FixtureServerOptions = {},
): Promise<FixtureServer> {
  const stepMs = options.stepMs ?? 400;
  const now = Date.now();
  const hub = new DashboardHub({ initial: initialState(now), heartbeatMs: 5_000 });
  const statics = serveStatic(options.distDir ?? defaultDistDir);
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let closed = false;
  let started = false;
  let resolveFinished!: () => void;
  const finished = new Promise<void>((r) => (resolveFinished = r));

  /** Publish `steps` on a timer; a step with `ticks: 0` goes out together with the one before. */
  const play = (steps: Step[], then?: () => void) => {
    let i = 0;
    const run = () => {
      if (closed) return;
      do {
        hub.publish(steps[i]!.event);
        i++;
      } while (i < steps.length && steps[i]!.ticks === 0);
      if (i >= steps.length) then?.();
      else schedule(steps[i]!.ticks);
    };
    const schedule = (ticks: number) => {
      const t = setTimeout(() => {
        timers.delete(t);
        run();
      }, ticks * stepMs);
      timers.add(t);
    };
    if (steps.length === 0) then?.();
    else schedule(steps[0]!.ticks);
  };

  const start = () => {
    if (started) return;
    started = true;
    play(scenario(now), resolveFinished);
  };

  const draining = new Set<string>();
  const onAction = (res: ServerResponse, key: string, action: string) => {
    const q = hub.state.queues.find((k) => k.key === key);
    if (!q) return apiError(res, 404, 'queue.unknown-key', `no queue key ${JSON.stringify(key)}`);
    if (q.status !== 'blocked' || draining.has(key)) {
      return apiError(res, 409, 'queue.not-blocked', `${key} is ${q.status}, not blocked`);
    }
    if (action === 'discard') {
      hub.publish({ type: 'queue:key', key: { ...q, status: 'idle', running: null, pending: [] } });
    } else {
      draining.add(key);
      play(resumeSteps(q), () => draining.delete(key));
    }
    sendJson(res, 200, { ok: true, key, action });
  };

  const handler = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname === '/api/events' && req.method === 'GET') {
      hub.handle(req, res);
      if (options.autoStart !== 'manual') start();
      return;
    }
    const m = /^\/api\/queues\/([^/]+)\/(resume|discard)$/.exec(url.pathname);
    if (m) {
      if (req.method !== 'POST') {
        res.setHeader('allow', 'POST');
        return apiError(res, 405, 'http.method', 'use POST');
      }
      req.resume();
      return onAction(res, decodeURIComponent(m[1]!), m[2]!);
    }
    if (url.pathname.startsWith('/api/')) {
      return apiError(res, 404, 'http.not-found', `no route ${url.pathname}`);
    }
    if (await statics(req, res)) return;
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('not found (did you run `vite build`?)\n');
  };

  const server = createServer((req, res) => {
    handler(req, res).catch((err: unknown) => {
      if (!res.headersSent) apiError(res, 500, 'http.internal', String(err));
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port, address } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;

  return {
    url: `http://${host}:${port}`,
    port,
    hub,
    start,
    finished,
    state: () => hub.state,
    close: async () => {
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      hub.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i === -1 ? undefined : process.argv[i + 1];
  };
  const fixture = await startFixtureServer({
    port: Number(arg('--port') ?? 8787),
    stepMs: Number(arg('--step-ms') ?? 400),
  });
  console.log(`fixture dashboard on ${fixture.url}`);
  const stop = () => void fixture.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
