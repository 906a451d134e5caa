/** The environment routes of `minicloud serve`: list, get, deploy (synchronous), tear down. */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Cloud } from '../cloud/index.js';
import { HttpError } from './errors.js';
import { anyObject, deployBody, envParams, environmentsResponse } from './schemas.js';

type Req<T extends { Params?: unknown; Body?: unknown }> = FastifyRequest<T>;

const READ = { access: 'read' } as const;
const DEPLOY = { access: 'deploy' } as const;

/** Adds `GET/POST /api/environments` and `GET/DELETE /api/environments/:name`. */
export function registerEnvironmentRoutes(app: FastifyInstance, cloud: Cloud): void {
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
}
