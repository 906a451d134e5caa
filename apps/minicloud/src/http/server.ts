/**
 * The HTTP face of a cloud (`minicloud serve`): a JSON API under `/api`, the Placement-compatible
 * API of `@rigging/reshape/http` under `/placement`, the dashboard's event stream at
 * `/api/events` and its built files at `/`.
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '@rigging/core';
import { createPlacementHandler } from '@rigging/reshape/http';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { DashboardHub, serveStatic } from '../../dashboard/serve.js';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import { TokenStore } from '../auth/tokens.js';
import { Auth, installAuth } from './auth.js';
import { ArchiveUploads } from './archive-upload.js';
import { dashboardDistDir } from './dashboard-dir.js';
import { seedFlows, seedQueueKeys } from './seed.js';
import { createMetrics, type Metrics } from './metrics.js';
import { installOpenApi, type RouteInfo } from './openapi.js';
import { registerEnvironmentRoutes } from './routes-environments.js';
import { registerFlowRoutes } from './routes-flows.js';
import { registerPackageRoutes } from './routes-packages.js';
import { registerQueueRoutes } from './routes-queues.js';
import { DemoRunner } from './demo.js';
import { HttpError, toApiError } from './errors.js';
import { errorBody, healthResponse, providersResponse, streamed } from './schemas.js';

/** Options of {@link createServer}. */
export interface ServerOptions {
  cloud: Cloud;
  /** The configuration the demo story runs with (`POST /api/demo`). */
  config: Config;
  /** pino instance for request logs (`createLogger()`); default: none. */
  logger?: Logger;
  /** The built dashboard. @default {@link dashboardDistDir} */
  dashboardDir?: string;
  /** How long `close()` lets a running demo finish. @default 30000 */
  closeGraceMs?: number;
  /**
   * Token checks. @default tokens from the cloud's database, required once one exists
   * (`mode: 'auto'`)
   */
  auth?: Auth;
  /** Most dashboard event streams open at once (one more gets 503). @default 100 */
  maxEventStreams?: number;
  /** Prometheus metrics served at `/metrics`. @default createMetrics(cloud), closed with the server */
  metrics?: Metrics;
}

/** A server built by {@link createServer}. */
export interface MinicloudServer {
  readonly app: FastifyInstance;
  /** The dashboard's event hub (fed from `cloud.hub`). */
  readonly hub: DashboardHub;
  /** Every route as `METHOD /url` (HEAD left out), and whether the OpenAPI document hides it. */
  readonly routes: readonly RouteInfo[];
  /** Starts listening; resolves with the base URL (`http://127.0.0.1:8787`). */
  listen(options: { host: string; port: number }): Promise<string>;
  /**
   * Stops accepting connections, ends the event streams, lets a running demo and in-flight
   * requests finish (up to `closeGraceMs`), then closes the server. Does not close the cloud.
   */
  close(): Promise<void>;
}

/** Largest body of every other route. */
const BODY_LIMIT = 64 * 1024;

/** Time a client has to send a whole request (headers: a third of it). */
const REQUEST_TIMEOUT_MS = 30_000;

const PUBLIC = { access: 'public' } as const;
const READ = { access: 'read' } as const;
const ADMIN = { access: 'admin' } as const;

/** Builds the Fastify app around `cloud` (not listening yet). */
export async function createServer(options: ServerOptions): Promise<MinicloudServer> {
  const { cloud } = options;
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger as unknown as FastifyBaseLogger } : {}),
    bodyLimit: BODY_LIMIT,
    // Refuse what the schemas do not describe instead of silently dropping or coercing it.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    return503OnClosing: true,
    // A client must send its whole request within this time (slow uploads, stalled bodies).
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Long keys are refused by the schemas with a clear 400, not by the router.
    routerOptions: { maxParamLength: 1000 },
    // Errors the router raises before a route runs (bad URL encoding, …): same body shape.
    frameworkErrors: (error, _request, reply) => {
      const { status, body, headers } = toApiError(error);
      void (reply as FastifyReply)
        .status(status)
        .headers(headers ?? {})
        .send(body);
    },
  });

  app.server.headersTimeout = REQUEST_TIMEOUT_MS / 3;

  // ------------------------------------------------------------------ dashboard hub
  const hub = new DashboardHub({
    initial: cloud.hub.state,
    maxClients: options.maxEventStreams ?? 100,
  });
  const offHub = cloud.hub.onAny((_type, event) => hub.publish(event));
  await cloud.providerTree().catch(() => []);
  cloud.publishCache();
  await seedQueueKeys(cloud, hub);
  await seedFlows(cloud, hub);

  // ------------------------------------------------------------------ errors
  app.setErrorHandler((error, request, reply) => {
    const { status, body, internal, headers } = toApiError(error);
    if (internal) request.log.error({ err: error }, 'minicloud serve: request failed');
    void reply
      .status(status)
      .headers(headers ?? {})
      .send(body);
  });

  // ------------------------------------------------------------------ OpenAPI
  const routes = await installOpenApi(app);

  // ------------------------------------------------------------------ authentication
  const auth = options.auth ?? new Auth({ tokens: new TokenStore(cloud.database), mode: 'auto' });
  installAuth(app, auth);

  // ------------------------------------------------------------------ metrics
  const metrics = options.metrics ?? createMetrics(cloud);
  metrics.instrument(app);
  app.get(
    '/metrics',
    {
      config: READ,
      schema: {
        summary: 'Prometheus metrics (text exposition format)',
        produces: ['text/plain'],
        response: { 200: { type: 'string', description: 'Prometheus text format 0.0.4' } },
      },
    },
    async (_req, reply) =>
      reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  app.setNotFoundHandler((request, reply) => {
    void reply.status(404).send({
      error: {
        code: 'minicloud.not_found',
        message: `no route ${request.method} ${request.url.split('?')[0]}`,
      },
    });
  });

  // ------------------------------------------------------------------ health
  const started = Date.now();
  app.get(
    '/api/health',
    { config: PUBLIC, schema: { response: { 200: healthResponse } } },
    async () => ({
      ok: true,
      uptimeMs: Date.now() - started,
      database: cloud.database.dialect,
      node: cloud.node.name,
      demoRunning: demo.running,
      dashboardClients: hub.clients,
    }),
  );

  // ------------------------------------------------------------------ environments
  registerEnvironmentRoutes(app, cloud);

  // ------------------------------------------------------------------ packages
  const uploads = new ArchiveUploads(join(options.config.dataDir, 'uploads'));
  await registerPackageRoutes(app, cloud, uploads);

  // ------------------------------------------------------------------ containers, ops and queues
  registerQueueRoutes(app, cloud, hub);

  // ------------------------------------------------------------------ flows
  registerFlowRoutes(app, cloud);

  // ------------------------------------------------------------------ providers
  app.get(
    '/api/providers',
    { config: READ, schema: { response: { 200: providersResponse } } },
    async () => ({ nodes: await cloud.providerTree() }),
  );

  // ------------------------------------------------------------------ demo
  const demo = new DemoRunner(cloud, options.config);
  app.post(
    '/api/demo',
    {
      config: ADMIN,
      schema: {
        summary: 'Run the demo story in this server',
        response: { 200: streamed('application/x-ndjson', 'the story, one JSON message a line') },
      },
    },
    async (req, reply) => {
      demo.check();
      reply.hijack();
      await demo.run(req.raw, reply.raw);
    },
  );

  // ------------------------------------------------------------------ dashboard events
  app.get(
    '/api/events',
    {
      config: READ,
      schema: {
        summary: 'The dashboard event stream',
        response: {
          200: streamed('text/event-stream', 'a snapshot, then every change'),
          503: errorBody,
        },
      },
    },
    (req, reply) => {
      reply.hijack();
      hub.handle(req.raw, reply.raw);
    },
  );

  // ------------------------------------------------------------------ Placement API
  await app.register(async (scope) => {
    // The Placement handler reads and parses bodies itself: leave the request stream unread.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    // Placement checks X-Auth-Token itself (401/403 with its own error body) once tokens are
    // required; until then every caller is admin, as with Placement's noauth.
    const open = createPlacementHandler(cloud.reshape, { basePath: '/placement' });
    const checked = createPlacementHandler(cloud.reshape, {
      basePath: '/placement',
      auth: {
        validate: async (token, req) => {
          const principal = await auth.verify(req, token);
          return principal && { roles: [principal.role] };
        },
      },
    });
    const route = async (req: FastifyRequest, reply: FastifyReply) => {
      const active = await auth.active();
      if (active) auth.checkLimit(req.raw);
      reply.hijack();
      (active ? checked : open)(req.raw, reply.raw);
    };
    scope.all('/placement', { config: PUBLIC, schema: { hide: true } }, route);
    scope.all('/placement/*', { config: PUBLIC, schema: { hide: true } }, route);
  });

  // ------------------------------------------------------------------ dashboard files
  const dist = options.dashboardDir
    ? { dir: options.dashboardDir, built: true }
    : dashboardDistDir();
  const statics = serveStatic(dist.dir);
  app.get('/*', { config: PUBLIC, schema: { hide: true } }, async (req, reply) => {
    const path = req.url.split('?')[0]!;
    if (path === '/api' || path.startsWith('/api/')) {
      throw new HttpError(404, 'minicloud.not_found', `no route GET ${path}`);
    }
    reply.hijack();
    if (await statics(req.raw, reply.raw)) return;
    const notBuilt = path === '/' || path === '/index.html';
    reply.raw
      .writeHead(notBuilt ? 503 : 404, { 'content-type': 'text/plain; charset=utf-8' })
      .end(
        notBuilt
          ? `the dashboard is not built (no ${dist.dir}index.html): run pnpm --filter minicloud build\n`
          : 'not found\n',
      );
  });

  let closing: Promise<void> | undefined;
  return {
    app,
    hub,
    routes,
    async listen({ host, port }) {
      await app.listen({ host, port });
      const address = app.server.address() as AddressInfo;
      const shown = address.address.includes(':') ? `[${address.address}]` : address.address;
      return `http://${shown}:${address.port}`;
    },
    close() {
      closing ??= (async () => {
        const closed = app.close();
        offHub();
        if (!options.metrics) metrics.close();
        await uploads.close();
        hub.close();
        await demo.drain(options.closeGraceMs ?? 30_000);
        const force = setTimeout(() => app.server.closeAllConnections(), 5_000);
        try {
          await closed;
        } finally {
          clearTimeout(force);
        }
      })();
      return closing;
    },
  };
}
