/** The flow routes of `minicloud serve`: recent flows and one flow's history, from the task log. */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Cloud } from '../cloud/index.js';
import { HttpError } from './errors.js';
import { answer, flowResponse, flowsResponse, type FlowAnswer } from './schemas.js';
import { flowParams, flowsQuery } from './schemas-requests.js';

type Req<T extends { Params?: unknown; Querystring?: unknown }> = FastifyRequest<T>;

const READ = { access: 'read' } as const;
const DEFAULT_LIST_LIMIT = 100;

/** Adds `GET /api/flows` and `GET /api/flows/:id`. */
export function registerFlowRoutes(app: FastifyInstance, cloud: Cloud): void {
  app.get(
    '/api/flows',
    {
      config: READ,
      schema: {
        operationId: 'listFlows',
        summary: 'Recent flows, newest first',
        querystring: flowsQuery,
        response: { 200: answer(flowsResponse, 'recent flows, newest first') },
      },
    },
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
    {
      config: READ,
      schema: {
        operationId: 'getFlow',
        summary: 'A flow and its history, from the task log',
        params: flowParams,
        response: { 200: answer(flowResponse, 'the flow and its history, in order') },
      },
    },
    async (req): Promise<FlowAnswer> => {
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
}
