/**
 * The HTTP face of a cloud (`minicloud serve`): a JSON API under `/api`, the Placement-compatible
 * API of `@rigging/reshape/http` under `/placement`, the dashboard's event stream at
 * `/api/events` and its built files at `/`.
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '@rigging/core';
import { createPlacementHandler } from '@rigging/reshape/http';
import swagger from '@fastify/swagger';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { DashboardHub, serveStatic } from '../../dashboard/serve.js';
import type { Cloud, ContainerOpPayload, ContainerOpType, PackageFile } from '../cloud/index.js';
import type { Config } from '../config.js';
import { TokenStore } from '../auth/tokens.js';
import { Auth, installAuth } from './auth.js';
import { ArchiveUploads, UPLOAD_LIMITS } from './archive-upload.js';
import { dashboardDistDir } from './dashboard-dir.js';
import { knownKey, seedFlows, seedQueueKeys } from './seed.js';
import { createMetrics, type Metrics } from './metrics.js';
import { DemoRunner } from './demo.js';
import { HttpError, toApiError } from './errors.js';
import {
  containerParams,
  deployBody,
  envParams,
  flowParams,
  flowsQuery,
  keyParams,
  opBody,
  opParams,
  packageParams,
  packageRefSchema,
  anyObject,
  opAccepted,
  streamed,
  healthResponse,
  environmentsResponse,
  containersResponse,
  queuesResponse,
  flowsResponse,
  providersResponse,
  errorBody,
  uploadBody,
} from './schemas.js';

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
  readonly routes: readonly { route: string; hidden: boolean }[];
  /** Starts listening; resolves with the base URL (`http://127.0.0.1:8787`). */
  listen(options: { host: string; port: number }): Promise<string>;
  /**
   * Stops accepting connections, ends the event streams, lets a running demo and in-flight
   * requests finish (up to `closeGraceMs`), then closes the server. Does not close the cloud.
   */
  close(): Promise<void>;
}

type Req<T extends { Params?: unknown; Body?: unknown; Querystring?: unknown }> = FastifyRequest<T>;

const DEFAULT_LIST_LIMIT = 100;
/** Largest package upload body (JSON with base64 file contents). */
const UPLOAD_BODY_LIMIT = 16 * 1024 * 1024;
/** Largest body of every other route. */
const BODY_LIMIT = 64 * 1024;

/** Media types of `POST /api/packages/{fqn}/{version}/archive`. */
const ARCHIVE_TYPES = [
  'application/gzip',
  'application/x-gzip',
  'application/x-tar',
  'application/zip',
  'application/octet-stream',
];

/** Time a client has to send a whole request (headers: a third of it). */
const REQUEST_TIMEOUT_MS = 30_000;

const PUBLIC = { access: 'public' } as const;
const READ = { access: 'read' } as const;
const DEPLOY = { access: 'deploy' } as const;
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
  // Every route documents the error answers it can give (before swagger reads the routes).
  const routes: { route: string; hidden: boolean }[] = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      if (method !== 'HEAD')
        routes.push({ route: `${method} ${route.url}`, hidden: !!route.schema?.hide });
    }
    if (route.schema?.hide) return;
    const access = route.config?.access ?? 'admin';
    const errors: Record<number, typeof errorBody> = { 400: errorBody, 404: errorBody };
    if (access !== 'public')
      Object.assign(errors, { 401: errorBody, 403: errorBody, 429: errorBody });
    if (route.method !== 'GET') Object.assign(errors, { 409: errorBody, 413: errorBody });
    route.schema = {
      ...route.schema,
      response: { ...errors, ...(route.schema?.response as object | undefined) },
    };
  });
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'minicloud API',
        version: '0.1.0',
        description:
          'The JSON API of `minicloud serve`. Errors answer `{ error: { code, message } }`.',
      },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer' },
          cookie: { type: 'apiKey', in: 'cookie', name: 'minicloud_token' },
        },
      },
      security: [{ bearer: [] }, { cookie: [] }],
    },
    // Only the JSON API: the dashboard's files and the Placement API are described elsewhere.
    hiddenTag: 'hidden',
  });

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

  app.get(
    '/api/openapi.json',
    {
      config: READ,
      schema: { summary: 'This document (OpenAPI 3.1)', response: { 200: anyObject } },
    },
    async () => app.swagger(),
  );

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
  app.get(
    '/api/environments',
    { config: READ, schema: { response: { 200: environmentsResponse } } },
    async () => ({
      environments: await cloud.environments(),
    }),
  );

  app.get(
    '/api/environments/:name',
    { config: READ, schema: { params: envParams, response: { 200: anyObject } } },
    async (req) => {
      const { name } = (req as Req<{ Params: { name: string } }>).params;
      const env = (await cloud.environments()).find((e) => e.name === name);
      if (!env) throw new HttpError(404, 'minicloud.env_not_found', `no environment named ${name}`);
      return env;
    },
  );

  app.post(
    '/api/environments',
    { config: DEPLOY, schema: { body: deployBody, response: { 200: anyObject, 201: anyObject } } },
    async (req, reply) => {
      const body = (
        req as Req<{
          Body: {
            name: string;
            package: { fqn: string; version: string };
            faults?: { vmFailOnce?: string[]; failStep?: string | null };
          };
        }>
      ).body;
      const result = await cloud.deployEnvironment(body.name, {
        package: body.package,
        ...(body.faults ? { faults: body.faults } : {}),
      });
      const { path: _path, ...pkg } = result.package;
      return reply.status(result.ok ? 201 : 200).send({ ...result, package: pkg });
    },
  );

  app.delete(
    '/api/environments/:name',
    { config: DEPLOY, schema: { params: envParams, response: { 200: anyObject } } },
    async (req) => {
      const { name } = (req as Req<{ Params: { name: string } }>).params;
      const report = await cloud.deleteEnvironment(name);
      return {
        env: report.env,
        destroyed: report.destroyed,
        failed: report.failed,
        released: report.released,
        notified: report.notified,
        plan: report.plan,
        packageRemoved: report.packageRemoved,
      };
    },
  );

  // ------------------------------------------------------------------ packages
  app.post(
    '/api/packages',
    {
      config: ADMIN,
      bodyLimit: UPLOAD_BODY_LIMIT,
      schema: { body: uploadBody, response: { 201: packageRefSchema } },
    },
    async (req, reply) => {
      const body = (
        req as Req<{
          Body: {
            fqn: string;
            version: string;
            files: { path: string; content?: string; base64?: string }[];
          };
        }>
      ).body;
      const seen = new Set<string>();
      const files: PackageFile[] = body.files.map((f) => {
        if (seen.has(f.path)) {
          throw new HttpError(400, 'minicloud.invalid_input', `duplicate file path ${f.path}`);
        }
        seen.add(f.path);
        return {
          path: f.path,
          content: f.base64 !== undefined ? Buffer.from(f.base64, 'base64') : f.content!,
        };
      });
      const ref = await cloud.uploadPackage(body.fqn, body.version, files);
      return reply.status(201).send(ref);
    },
  );

  const uploads = new ArchiveUploads(join(options.config.dataDir, 'uploads'));
  await app.register(async (scope) => {
    scope.addContentTypeParser(
      ARCHIVE_TYPES,
      { parseAs: 'buffer', bodyLimit: UPLOAD_LIMITS.maxArchiveBytes },
      (_req, body, done) => done(null, body),
    );
    scope.post(
      '/api/packages/:fqn/:version/archive',
      {
        config: ADMIN,
        bodyLimit: UPLOAD_LIMITS.maxArchiveBytes,
        schema: {
          summary: 'Upload a package as a tar, tar.gz or zip archive (bounded; see the README)',
          params: packageParams,
          consumes: ARCHIVE_TYPES,
          response: { 201: packageRefSchema },
        },
      },
      async (req, reply) => {
        const { fqn, version } = (req as Req<{ Params: { fqn: string; version: string } }>).params;
        const files = await uploads.unpack(fqn, version, req.body as Buffer);
        return reply.status(201).send(await cloud.uploadPackage(fqn, version, files));
      },
    );
  });

  app.get(
    '/api/packages/:fqn/:version',
    { config: READ, schema: { params: packageParams, response: { 200: anyObject } } },
    async (req) => {
      const { fqn, version } = (req as Req<{ Params: { fqn: string; version: string } }>).params;
      const current = await cloud.repository.current(fqn, version);
      if (!current) {
        throw new HttpError(
          404,
          'minicloud.package_not_found',
          `package ${fqn} ${version} is not in the repository`,
        );
      }
      return current;
    },
  );

  // ------------------------------------------------------------------ containers and ops
  app.get(
    '/api/containers',
    { config: READ, schema: { response: { 200: containersResponse } } },
    async () => {
      const containers = await cloud.containers();
      return {
        containers: await Promise.all(
          containers.map(async (c) => ({ ...c, status: await cloud.queue.keyStatus(c.name) })),
        ),
      };
    },
  );

  app.post(
    '/api/containers/:name/ops',
    {
      config: DEPLOY,
      schema: { params: containerParams, body: opBody, response: { 202: opAccepted } },
    },
    async (req, reply) => {
      const r = req as Req<{
        Params: { name: string };
        Body: { type: ContainerOpType; payload?: ContainerOpPayload };
      }>;
      const opId = await cloud.castContainerOp(r.params.name, r.body.type, r.body.payload ?? {});
      return reply.status(202).send({ opId, key: r.params.name, type: r.body.type });
    },
  );

  app.get(
    '/api/ops/:id',
    { config: READ, schema: { params: opParams, response: { 200: anyObject } } },
    async (req) => {
      const { id } = (req as Req<{ Params: { id: string } }>).params;
      const op = await cloud.queue.get(id);
      if (!op) throw new HttpError(404, 'minicloud.op_not_found', `no operation ${id}`);
      return op;
    },
  );

  // ------------------------------------------------------------------ queues
  app.get(
    '/api/queues',
    { config: READ, schema: { response: { 200: queuesResponse } } },
    async () => ({ keys: await cloud.queue.activeKeys() }),
  );

  app.get(
    '/api/queues/:key',
    { config: READ, schema: { params: keyParams, response: { 200: anyObject } } },
    async (req) => {
      const { key } = (req as Req<{ Params: { key: string } }>).params;
      const info = await cloud.queue.inspect(key);
      if (info.status === 'idle' && !info.running && !(await knownKey(cloud, hub, key))) {
        throw new HttpError(404, 'queue.unknown-key', `no queue key ${JSON.stringify(key)}`);
      }
      return info;
    },
  );

  const queueAction = (action: 'resume' | 'discard') => async (req: FastifyRequest) => {
    const { key } = (req as Req<{ Params: { key: string } }>).params;
    const status = await cloud.queue.keyStatus(key);
    if (status !== 'blocked') {
      if (status === 'idle' && !(await knownKey(cloud, hub, key))) {
        throw new HttpError(404, 'queue.unknown-key', `no queue key ${JSON.stringify(key)}`);
      }
      throw new HttpError(409, 'queue.not-blocked', `${key} is ${status}, not blocked`);
    }
    if (action === 'resume') {
      if (!(await cloud.queue.resume(key))) {
        throw new HttpError(409, 'queue.not-blocked', `${key} is no longer blocked`);
      }
      return { ok: true, key, action };
    }
    const cancelled = await cloud.queue.discard(key);
    return { ok: true, key, action, cancelled };
  };
  app.post(
    '/api/queues/:key/resume',
    { config: DEPLOY, schema: { params: keyParams, response: { 200: anyObject } } },
    queueAction('resume'),
  );
  app.post(
    '/api/queues/:key/discard',
    { config: DEPLOY, schema: { params: keyParams, response: { 200: anyObject } } },
    queueAction('discard'),
  );

  // ------------------------------------------------------------------ flows
  app.get(
    '/api/flows',
    { config: READ, schema: { querystring: flowsQuery, response: { 200: flowsResponse } } },
    async (req) => {
      const q = (req as Req<{ Querystring: { limit?: string; state?: string } }>).query;
      const flows = await cloud.engine.flows({
        limit: q.limit ? Number(q.limit) : DEFAULT_LIST_LIMIT,
        ...(q.state ? { states: [q.state as never] } : {}),
      });
      return { flows };
    },
  );

  app.get(
    '/api/flows/:id',
    { config: READ, schema: { params: flowParams, response: { 200: anyObject } } },
    async (req) => {
      const { id } = (req as Req<{ Params: { id: string } }>).params;
      const history = await cloud.engine.history(id);
      if (history.length === 0) {
        throw new HttpError(404, 'minicloud.flow_not_found', `no flow ${id} in the task log`);
      }
      const summary = (await cloud.engine.flows({ limit: 1000 })).find((f) => f.flowId === id);
      const last = history[history.length - 1]!;
      return {
        flowId: id,
        name: summary?.name ?? null,
        state: summary?.state ?? null,
        createdAt: summary?.createdAt ?? history[0]!.at,
        updatedAt: summary?.updatedAt ?? last.at,
        history: history.map((e) => ({
          seq: e.seq,
          task: e.task,
          state: e.state,
          attempt: e.attempt ?? null,
          at: e.at,
          ...(e.failure ? { failure: e.failure } : {}),
          ...(e.result !== undefined ? { result: e.result } : {}),
        })),
      };
    },
  );

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
