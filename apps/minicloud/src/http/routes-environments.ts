/** The environment routes of `minicloud serve`: list, get, deploy (synchronous), tear down. */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Cloud } from '../cloud/index.js';
import { HttpError } from './errors.js';
import { link } from './openapi.js';
import {
  answer,
  deleteResponse,
  deployResponse,
  environmentResponse,
  environmentsResponse,
  type DeleteAnswer,
  type DeployAnswer,
} from './schemas.js';
import { deployBody, envParams } from './schemas-requests.js';

type Req<T extends { Params?: unknown; Body?: unknown }> = FastifyRequest<T>;

const READ = { access: 'read' } as const;
const DEPLOY = { access: 'deploy' } as const;

/** What a client does next with a deployed environment (OpenAPI links of the 201 answer). */
const ENVIRONMENT_LINKS = {
  getEnvironment: link('getEnvironment', { name: 'env' }, 'read the environment back'),
  deleteEnvironment: link('deleteEnvironment', { name: 'env' }, 'tear it down'),
  getDeployFlow: link('getFlow', { id: 'flowId' }, "the deployment flow's history"),
};

/** The failed deployment's flow (OpenAPI link of the 200 answer). */
const FLOW_LINK = { getDeployFlow: ENVIRONMENT_LINKS.getDeployFlow };

/** Adds `GET/POST /api/environments` and `GET/DELETE /api/environments/:name`. */
export function registerEnvironmentRoutes(app: FastifyInstance, cloud: Cloud): void {
  app.get(
    '/api/environments',
    {
      config: READ,
      schema: {
        operationId: 'listEnvironments',
        summary: 'List the environments',
        response: { 200: answer(environmentsResponse, 'every environment, by name') },
      },
    },
    async () => ({
      environments: await cloud.environments(),
    }),
  );

  app.get(
    '/api/environments/:name',
    {
      config: READ,
      schema: {
        operationId: 'getEnvironment',
        summary: 'One environment',
        params: envParams,
        response: { 200: answer(environmentResponse, 'the environment') },
      },
    },
    async (req) => {
      const { name } = (req as Req<{ Params: { name: string } }>).params;
      const env = (await cloud.environments()).find((e) => e.name === name);
      if (!env) throw new HttpError(404, 'minicloud.env_not_found', `no environment named ${name}`);
      return env;
    },
  );

  app.post(
    '/api/environments',
    {
      config: { ...DEPLOY, links: { 201: ENVIRONMENT_LINKS, 200: FLOW_LINK } },
      schema: {
        operationId: 'deployEnvironment',
        summary: 'Deploy an environment (answers once the flow ended: 201 deployed, 200 reverted)',
        body: deployBody,
        response: {
          200: answer(deployResponse, 'the deployment failed and was reverted'),
          201: answer(deployResponse, 'the environment is deployed'),
        },
      },
    },
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
      const answer: DeployAnswer = { ...result, package: pkg };
      return reply.status(result.ok ? 201 : 200).send(answer);
    },
  );

  app.delete(
    '/api/environments/:name',
    {
      config: DEPLOY,
      schema: {
        operationId: 'deleteEnvironment',
        summary: 'Tear an environment down (answers once it is gone)',
        params: envParams,
        response: {
          200: answer(
            deleteResponse,
            'the environment is gone: what was destroyed, released and notified, in order, and the plan',
          ),
        },
      },
    },
    async (req): Promise<DeleteAnswer> => {
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
