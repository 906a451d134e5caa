/**
 * The container and queue routes of `minicloud serve`: containers, container ops (cast to the
 * per-container queue), ops by id, active queue keys, and resume/discard of blocked keys.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { OpInfo } from '@rigging/async-queue';
import type { DashboardHub } from '../../dashboard/serve.js';
import type { Cloud, ContainerOpPayload, ContainerOpType } from '../cloud/index.js';
import { HttpError } from './errors.js';
import { link } from './openapi.js';
import {
  answer,
  containersResponse,
  discardResponse,
  keyResponse,
  opAccepted,
  opResponse,
  queuesResponse,
  resumeResponse,
} from './schemas.js';
import { containerParams, keyParams, opBody, opParams, opQuery } from './schemas-requests.js';
import { knownKey } from './seed.js';

type Req<T extends { Params?: unknown; Body?: unknown }> = FastifyRequest<T>;

const READ = { access: 'read' } as const;
const DEPLOY = { access: 'deploy' } as const;

/** What a client does next with a queued op (OpenAPI links of the 202 answer). */
const OP_LINKS = {
  getOp: link('getOp', { id: 'opId' }, "the op's status and result"),
  getQueueKey: link(
    'getQueueKey',
    { key: 'key' },
    "the container's queue: its running and pending ops",
  ),
};

/** A blocked key's queue, once resumed or discarded (OpenAPI link of the 200 answers). */
const KEY_LINK = { getQueueKey: OP_LINKS.getQueueKey };

/**
 * The op once it has ended, or as it is after `waitMs`: the wait also ends (with the op as it is
 * then) when the client goes away or the server closes.
 */
async function longPoll(
  cloud: Cloud,
  id: string,
  waitMs: number,
  reply: FastifyReply,
  closing: AbortSignal,
): Promise<OpInfo | undefined> {
  const gone = new AbortController();
  const onClose = () => gone.abort();
  reply.raw.once('close', onClose);
  try {
    return await cloud.queue.get(id, {
      waitMs,
      signal: AbortSignal.any([closing, gone.signal]),
    });
  } catch (error) {
    if (!closing.aborted && !gone.signal.aborted) throw error;
    // The server is closing: the connection with it, once answered (or it would hold the close).
    if (closing.aborted) void reply.header('connection', 'close');
    return cloud.queue.get(id);
  } finally {
    reply.raw.off('close', onClose);
  }
}

/** Adds the `/api/containers`, `/api/ops` and `/api/queues` routes. */
export function registerQueueRoutes(app: FastifyInstance, cloud: Cloud, hub: DashboardHub): void {
  // Long polls end as the server starts closing, so that they do not hold its close up.
  const closing = new AbortController();
  app.addHook('preClose', async () => closing.abort());

  app.get(
    '/api/containers',
    {
      config: READ,
      schema: {
        operationId: 'listContainers',
        summary: 'List the containers, each with its queue status',
        response: { 200: answer(containersResponse, 'every container, with its queue status') },
      },
    },
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
      config: { ...DEPLOY, links: { 202: OP_LINKS } },
      schema: {
        operationId: 'castContainerOp',
        summary: "Queue an operation on a container (runs in order with the container's others)",
        params: containerParams,
        body: opBody,
        response: { 202: answer(opAccepted, 'the op is queued') },
      },
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
    {
      config: READ,
      schema: {
        operationId: 'getOp',
        summary: 'One container operation; with waitMs, once it has ended (a long poll)',
        params: opParams,
        querystring: opQuery,
        response: { 200: answer(opResponse, 'the op') },
      },
    },
    async (req, reply) => {
      const r = req as Req<{ Params: { id: string }; Querystring: { waitMs?: string } }>;
      const { id } = r.params;
      const waitMs = Number(r.query.waitMs ?? 0);
      const op =
        waitMs > 0
          ? await longPoll(cloud, id, waitMs, reply, closing.signal)
          : await cloud.queue.get(id);
      if (!op) throw new HttpError(404, 'minicloud.op_not_found', `no operation ${id}`);
      return op;
    },
  );

  // ------------------------------------------------------------------ queues
  app.get(
    '/api/queues',
    {
      config: READ,
      schema: {
        operationId: 'listQueueKeys',
        summary: 'The queue keys that are not idle',
        response: { 200: answer(queuesResponse, 'the keys that are not idle') },
      },
    },
    async () => ({ keys: await cloud.queue.activeKeys() }),
  );

  app.get(
    '/api/queues/:key',
    {
      config: READ,
      schema: {
        operationId: 'getQueueKey',
        summary: "A queue key's status, running op and pending ops",
        params: keyParams,
        response: { 200: answer(keyResponse, "the key's status, running op and pending ops") },
      },
    },
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
    {
      config: { ...DEPLOY, links: { 200: KEY_LINK } },
      schema: {
        operationId: 'resumeQueueKey',
        summary: 'Unblock a blocked key: its held ops run',
        params: keyParams,
        response: { 200: answer(resumeResponse, 'the key is unblocked: its held ops run') },
      },
    },
    queueAction('resume'),
  );
  app.post(
    '/api/queues/:key/discard',
    {
      config: { ...DEPLOY, links: { 200: KEY_LINK } },
      schema: {
        operationId: 'discardQueueKey',
        summary: "Cancel a blocked key's held ops and unblock it",
        params: keyParams,
        response: {
          200: answer(discardResponse, "the key's held ops are cancelled and the key unblocked"),
        },
      },
    },
    queueAction('discard'),
  );
}
