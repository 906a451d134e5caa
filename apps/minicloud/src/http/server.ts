/**
 * The HTTP face of a cloud (`minicloud serve`): a JSON API under `/api`, the Placement-compatible
 * API of `@rigging/reshape/http` under `/placement`, the dashboard's event stream at
 * `/api/events` and its built files at `/`.
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '@rigging/core';
import type { FastifyInstance } from 'fastify';
import type { DashboardHub } from '../../dashboard/serve.js';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import { TokenStore } from '../auth/tokens.js';
import { Auth, installAuth } from './auth.js';
import { ArchiveUploads } from './archive-upload.js';
import { createApp } from './app.js';
import { Redactor } from './redact.js';
import { installGuard, RequestGuard } from './guard.js';
import { DemoRunner } from './demo.js';
import { createMetrics, type Metrics } from './metrics.js';
import { installOpenApi, type RouteInfo } from './openapi.js';
import { registerDashboardFiles, registerEventsRoute } from './routes-dashboard.js';
import { registerEnvironmentRoutes } from './routes-environments.js';
import { registerFlowRoutes } from './routes-flows.js';
import { registerPackageRoutes } from './routes-packages.js';
import { registerPlacementRoutes } from './routes-placement.js';
import { registerQueueRoutes } from './routes-queues.js';
import {
  registerDemoRoute,
  registerHealthRoute,
  registerMetricsRoute,
  registerProviderRoute,
} from './routes-service.js';
import { openDashboardHub } from './seed.js';

/** Options of {@link createServer}. */
export interface ServerOptions {
  cloud: Cloud;
  /** The configuration the demo story runs with (`POST /api/demo`). */
  config: Config;
  /** pino instance for request logs (`createLogger()`); default: none. */
  logger?: Logger;
  /** The built dashboard. @default the app's `dashboard/dist` (`dashboardDistDir()`) */
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
  /**
   * `Host` names accepted besides the bound address, `localhost`, `127.0.0.1` and `[::1]`
   * (`--allowed-host`). @default none
   */
  allowedHosts?: readonly string[];
  /** Origins whose pages may send non-GET requests besides the server's own. @default none */
  allowedOrigins?: readonly string[];
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

/** What a server owns and closes, beside the app. */
interface ServerParts {
  app: FastifyInstance;
  hub: DashboardHub;
  routes: readonly RouteInfo[];
  /** Unsubscribes the hub from the cloud's events. */
  offHub: () => void;
  /** The server's own metrics (closed with it), undefined when they were given. */
  ownMetrics: Metrics | undefined;
  uploads: ArchiveUploads;
  demo: DemoRunner;
  closeGraceMs: number;
  guard: RequestGuard;
}

/** Event streams one caller (token, or address without tokens) may hold at once. */
const MAX_STREAMS_PER_CALLER = 25;

/** How long in-flight requests may take once closing before their connections are cut. */
const FORCE_CLOSE_MS = 5_000;

class Server implements MinicloudServer {
  readonly app: FastifyInstance;
  readonly hub: DashboardHub;
  readonly routes: readonly RouteInfo[];
  readonly #parts: ServerParts;
  #closing: Promise<void> | undefined;

  constructor(parts: ServerParts) {
    this.app = parts.app;
    this.hub = parts.hub;
    this.routes = parts.routes;
    this.#parts = parts;
  }

  async listen({ host, port }: { host: string; port: number }): Promise<string> {
    this.#parts.guard.bind(host);
    await this.app.listen({ host, port });
    const address = this.app.server.address() as AddressInfo;
    const shown = address.address.includes(':') ? `[${address.address}]` : address.address;
    return `http://${shown}:${address.port}`;
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    const { app, hub, offHub, ownMetrics, uploads, demo, closeGraceMs } = this.#parts;
    const closed = app.close();
    offHub();
    ownMetrics?.close();
    await uploads.close();
    hub.close();
    await demo.drain(closeGraceMs);
    const force = setTimeout(() => app.server.closeAllConnections(), FORCE_CLOSE_MS);
    try {
      await closed;
    } finally {
      clearTimeout(force);
    }
  }
}

/** Builds the Fastify app around `cloud` (not listening yet). */
export async function createServer(options: ServerOptions): Promise<MinicloudServer> {
  const { cloud } = options;
  const app = createApp(
    options.logger,
    new Redactor([options.config.dataDir, options.config.baseDir]),
  );
  const guard = new RequestGuard({
    ...(options.allowedHosts ? { allowedHosts: options.allowedHosts } : {}),
    ...(options.allowedOrigins ? { allowedOrigins: options.allowedOrigins } : {}),
  });
  // Host and Origin first: a foreign page learns nothing, not even whether a token is needed.
  installGuard(app, guard);
  const maxEventStreams = options.maxEventStreams ?? 100;
  const { hub, off: offHub } = await openDashboardHub(cloud, maxEventStreams);
  // The document generator first, so that it sees every route registered after it.
  const routes = await installOpenApi(app);
  const auth = options.auth ?? new Auth({ tokens: new TokenStore(cloud.database), mode: 'auto' });
  installAuth(app, auth);
  const metrics = options.metrics ?? createMetrics(cloud);
  registerMetricsRoute(app, metrics);

  const demo = new DemoRunner(cloud, options.config);
  const uploads = new ArchiveUploads(join(options.config.dataDir, 'uploads'));
  registerHealthRoute(app, { cloud, hub, demo });
  registerEnvironmentRoutes(app, cloud);
  await registerPackageRoutes(app, cloud, uploads);
  registerQueueRoutes(app, cloud, hub);
  registerFlowRoutes(app, cloud);
  registerProviderRoute(app, cloud);
  registerDemoRoute(app, demo);
  registerEventsRoute(app, hub, Math.min(maxEventStreams, MAX_STREAMS_PER_CALLER));
  await registerPlacementRoutes(app, cloud, auth);
  registerDashboardFiles(app, options.dashboardDir);

  return new Server({
    app,
    hub,
    routes,
    offHub,
    ownMetrics: options.metrics ? undefined : metrics,
    uploads,
    demo,
    closeGraceMs: options.closeGraceMs ?? 30_000,
    guard,
  });
}
