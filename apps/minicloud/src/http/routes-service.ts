/**
 * The service routes of `minicloud serve`: Prometheus metrics, health, the provider tree and the
 * demo story run in the server.
 */
import type { FastifyInstance } from 'fastify';
import type { DashboardHub } from '../../dashboard/serve.js';
import type { Cloud } from '../cloud/index.js';
import type { DemoRunner } from './demo.js';
import type { Metrics } from './metrics.js';
import { answer, healthResponse, providersResponse, streamed } from './schemas.js';

const PUBLIC = { access: 'public' } as const;
const READ = { access: 'read' } as const;
const ADMIN = { access: 'admin' } as const;

/** Counts requests into `metrics` and adds `GET /metrics`. */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics): void {
  metrics.instrument(app);
  app.get(
    '/metrics',
    {
      config: READ,
      schema: {
        operationId: 'getMetrics',
        summary: 'Prometheus metrics (text exposition format)',
        produces: ['text/plain'],
        response: { 200: { type: 'string', description: 'Prometheus text format 0.0.4' } },
      },
    },
    async (_req, reply) =>
      reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
}

/** Adds `GET /api/health`. */
export function registerHealthRoute(
  app: FastifyInstance,
  { cloud, hub, demo }: { cloud: Cloud; hub: DashboardHub; demo: DemoRunner },
): void {
  const started = Date.now();
  app.get(
    '/api/health',
    {
      config: PUBLIC,
      schema: {
        operationId: 'getHealth',
        summary: 'Whether the server is up, and what it runs on',
        response: { 200: answer(healthResponse, 'the server is up') },
      },
    },
    async () => ({
      ok: true,
      uptimeMs: Date.now() - started,
      database: cloud.database.dialect,
      node: cloud.node.name,
      demoRunning: demo.running,
      dashboardClients: hub.clients,
    }),
  );
}

/** Adds `GET /api/providers`. */
export function registerProviderRoute(app: FastifyInstance, cloud: Cloud): void {
  app.get(
    '/api/providers',
    {
      config: READ,
      schema: {
        operationId: 'getProviderTree',
        summary: 'The resource provider tree of the compute node',
        response: { 200: answer(providersResponse, 'the provider tree, roots first') },
      },
    },
    async () => ({ nodes: await cloud.providerTree() }),
  );
}

/** Adds `POST /api/demo`: the story, streamed as newline-delimited JSON. */
export function registerDemoRoute(app: FastifyInstance, demo: DemoRunner): void {
  app.post(
    '/api/demo',
    {
      config: ADMIN,
      schema: {
        operationId: 'runDemo',
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
}
