/**
 * The dashboard's routes: its event stream (`GET /api/events`) and its built files at `/`.
 */
import type { FastifyInstance } from 'fastify';
import { serveStatic, type DashboardHub } from '../../dashboard/serve.js';
import { dashboardDistDir } from './dashboard-dir.js';
import { echoPath } from './app.js';
import { HttpError } from './errors.js';
import { errorBody, streamed } from './schemas.js';

/**
 * Adds `GET /api/events`, the server-sent events the dashboard follows. One caller (a token, or
 * an address when no token is needed) holds at most `perCaller` of the hub's streams.
 */
export function registerEventsRoute(
  app: FastifyInstance,
  hub: DashboardHub,
  perCaller: number,
): void {
  const open = new Map<string, number>();
  app.get(
    '/api/events',
    {
      config: { access: 'read' },
      schema: {
        operationId: 'followEvents',
        summary: 'The dashboard event stream',
        response: {
          200: streamed('text/event-stream', 'a snapshot, then every change'),
          503: errorBody,
        },
      },
    },
    (req, reply) => {
      const caller = req.principal?.id ?? `addr:${req.socket.remoteAddress ?? 'unknown'}`;
      const held = open.get(caller) ?? 0;
      if (held >= perCaller) {
        throw new HttpError(
          503,
          'minicloud.too_many_streams',
          `this caller already follows ${held} event streams`,
          { 'retry-after': '5' },
        );
      }
      open.set(caller, held + 1);
      reply.raw.once('close', () => {
        const n = (open.get(caller) ?? 1) - 1;
        if (n > 0) open.set(caller, n);
        else open.delete(caller);
      });
      reply.hijack();
      hub.handle(req.raw, reply.raw);
    },
  );
}

/**
 * Serves the built dashboard from `dashboardDir` (default {@link dashboardDistDir}) for every
 * `GET` no other route takes; `503` with how to build it when it is not built.
 */
export function registerDashboardFiles(app: FastifyInstance, dashboardDir?: string): void {
  const dist = dashboardDir ? { dir: dashboardDir, built: true } : dashboardDistDir();
  const statics = serveStatic(dist.dir);
  app.get('/*', { config: { access: 'public' }, schema: { hide: true } }, async (req, reply) => {
    const path = req.url.split('?')[0]!;
    if (path === '/api' || path.startsWith('/api/')) {
      throw new HttpError(404, 'minicloud.not_found', `no route GET ${echoPath(path)}`);
    }
    reply.hijack();
    if (await statics(req.raw, reply.raw)) return;
    const notBuilt = path === '/' || path === '/index.html';
    const error = notBuilt
      ? {
          code: 'minicloud.dashboard_not_built',
          message: 'the dashboard is not built (no index.html): run pnpm --filter minicloud build',
        }
      : { code: 'minicloud.not_found', message: `no file ${echoPath(path)}` };
    reply.raw
      .writeHead(notBuilt ? 503 : 404, { 'content-type': 'application/json; charset=utf-8' })
      .end(JSON.stringify({ error: { ...error, requestId: req.id } }));
  });
}
