/**
 * JSON schemas of the API's answers: they also serialize them (fast-json-stringify) and make the
 * OpenAPI document. The inputs' schemas are in `schemas-requests.ts`.
 */
import type { KeyInfo, KeyStatus, OpInfo } from '@rigging/async-queue';
import type { SerializedError } from '@rigging/core';
import { taskStates, type FlowSummary, type LogEntry, type TaskFailure } from '@rigging/tasks';
import {
  CONTAINER_OPS,
  type Cloud,
  type ContainerOpPayload,
  type ContainerOpResult,
  type DeployResult,
  type PackageRef,
} from '../cloud/index.js';
import type { DeleteResult } from '../cloud/open-cloud.js';
import type { PlanView, ProviderNode } from '../wire.js';
import type { ApiErrorBody } from './errors.js';
import { containerName, envName } from './schemas-requests.js';

/**
 * A JSON schema as the route options and the OpenAPI document take it. The response schemas
 * below also serialize the answers (fast-json-stringify drops what a closed schema does not
 * list), so each is written against the TypeScript type of what its route returns: {@link closed}
 * makes the compiler refuse a schema that misses a field of the type or names one it lacks.
 */
type Schema = Readonly<Record<string, unknown>>;

/** The keys of `T` that may be absent. */
type OptionalKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? K : never }[keyof T];

/**
 * A closed object schema (`additionalProperties: false`) with one property per field of `T`,
 * every field required except those named in `optional` (which must be optional in `T`).
 */
function closed<T>(
  properties: { readonly [K in keyof T]-?: Schema },
  optional: readonly OptionalKeys<T>[] = [],
  description?: string,
): Schema {
  const absent = new Set<PropertyKey>(optional);
  return {
    type: 'object',
    additionalProperties: false,
    required: Object.keys(properties).filter((k) => !absent.has(k)),
    properties,
    ...(description ? { description } : {}),
  };
}

const string = { type: 'string' } as const;
const integer = { type: 'integer' } as const;
const boolean = { type: 'boolean' } as const;
const nullableString = { type: ['string', 'null'] } as const;
const strings = { type: 'array', items: string } as const;
/** Epoch milliseconds. */
const time = { type: 'integer', description: 'epoch milliseconds' } as const;
/** Any JSON value. */
const json = { description: 'any JSON value' } as const;
const arrayOf = (items: Schema) => ({ type: 'array', items }) as const;
const nullable = (schema: Schema) => ({ anyOf: [schema, { type: 'null' }] }) as const;

/** The body of every error answer: `{ error: { code, message, requestId? } }`. */
export const errorBody = closed<{ error: unknown }>({
  error: closed<Omit<ApiErrorBody['error'], 'details'>>(
    {
      code: { type: 'string', description: 'stable, e.g. minicloud.unauthorized' },
      message: string,
      requestId: {
        type: 'string',
        description:
          'the id the server log has this request under (also the x-request-id header); ' +
          'absent only on errors of the HTTP parser (malformed request, headers too large)',
      },
    },
    ['requestId'],
  ),
});

/** `GET /api/health`. */
export const healthResponse = closed<{
  ok: boolean;
  uptimeMs: number;
  database: string;
  node: string;
  demoRunning: boolean;
  dashboardClients: number;
}>({
  ok: boolean,
  uptimeMs: integer,
  database: { type: 'string', enum: ['sqlite', 'postgres', 'mysql'] },
  node: string,
  demoRunning: boolean,
  dashboardClients: integer,
});

/** An environment, as `Cloud.environments()` lists it. */
type Environment = Awaited<ReturnType<Cloud['environments']>>[number];

/** An environment, as `GET /api/environments` lists it. */
const environment = closed<Environment>({
  name: envName,
  state: { type: 'string', description: 'deploying, deployed or deleting' },
  package: { type: 'string', description: 'the package upload, as fqn/version/id' },
  flowId: { type: 'string', description: 'the flow that deployed it (GET /api/flows/{id})' },
});

/** `GET /api/environments`. */
export const environmentsResponse = closed<{ environments: Environment[] }>({
  environments: arrayOf(environment),
});
/** `GET /api/environments/{name}`. */
export const environmentResponse = environment;

/** What `POST /api/environments` answers: the deployment, its package without its path. */
export type DeployAnswer = Omit<DeployResult, 'package'> & {
  package: Omit<DeployResult['package'], 'path'>;
};

/** `POST /api/environments` (201 deployed, 200 the flow failed and was reverted). */
export const deployResponse = closed<DeployAnswer>({
  env: envName,
  flowId: { type: 'string', description: 'GET /api/flows/{id} has its history' },
  ok: { type: 'boolean', description: 'false when a task failed and the flow was reverted' },
  package: closed<DeployAnswer['package']>({
    fqn: string,
    version: string,
    id: string,
    hit: { type: 'boolean', description: 'whether the package was already in the cache' },
  }),
  retried: {
    type: 'object',
    description: 'task names with more than one attempt, e.g. { "vm-2": 2 }',
    additionalProperties: integer,
  },
  failure: nullable(
    closed<NonNullable<DeployResult['failure']>>({ task: nullableString, message: string }),
  ),
  reverted: { ...strings, description: 'tasks reverted, in the order they were reverted' },
  vms: {
    type: 'object',
    description: 'VM → the GPU provider it got a VGPU on',
    additionalProperties: string,
  },
  durationMs: integer,
});

/** A teardown plan, as the dashboard shows it. */
const planView = closed<PlanView>({
  id: string,
  root: string,
  createdAt: time,
  groups: { ...arrayOf(strings), description: 'object ids, group by group, in destruction order' },
  objects: arrayOf(
    closed<PlanView['objects'][number]>(
      {
        id: string,
        type: string,
        name: string,
        state: {
          type: 'string',
          enum: ['pending', 'destroying', 'destroyed', 'failed', 'skipped'],
        },
      },
      ['name'],
    ),
  ),
  edges: arrayOf(
    closed<PlanView['edges'][number]>({
      from: string,
      to: string,
      kind: { type: 'string', enum: ['owns', 'depends'] },
      reason: string,
    }),
  ),
  cycles: arrayOf(strings),
});

/** A package upload in the repository (`fqn/version/id`). */
export const packageRefSchema = closed<PackageRef>({ fqn: string, version: string, id: string });

/** What `DELETE /api/environments/{name}` answers. */
export type DeleteAnswer = Pick<
  DeleteResult,
  'env' | 'destroyed' | 'failed' | 'released' | 'notified' | 'plan' | 'packageRemoved'
>;

/** `DELETE /api/environments/{name}`. */
export const deleteResponse = closed<DeleteAnswer>({
  env: envName,
  destroyed: { ...strings, description: 'object ids in the order they were destroyed' },
  failed: strings,
  released: { ...strings, description: 'reshape consumers whose allocations were released' },
  notified: { ...strings, description: 'subscriber ← publisher notifications, in order' },
  plan: planView,
  packageRemoved: nullable(packageRefSchema),
});

/** `GET /api/packages/{fqn}/{version}`: the current upload. */
export const packageResponse = closed<
  NonNullable<Awaited<ReturnType<Cloud['repository']['current']>>>
>({
  fqn: string,
  version: string,
  id: string,
  size: { type: 'integer', description: 'bytes of the stored archive' },
  integrity: { type: 'string', description: 'the archive digest (sha512-…)' },
});

/** A container, with its queue key's status. */
type ContainerAnswer = Awaited<ReturnType<Cloud['containers']>>[number] & { status: KeyStatus };

/** A queue key's status: idle, queued, blocked or `<op>-in-progress`. */
const keyStatus = {
  type: 'string',
  pattern: `^(?:idle|queued|blocked|(?:${CONTAINER_OPS.join('|')})-in-progress)$`,
} as const;

/** `GET /api/containers`. */
export const containersResponse = closed<{ containers: ContainerAnswer[] }>({
  containers: arrayOf(
    closed<ContainerAnswer>({
      name: containerName,
      image: string,
      state: string,
      status: keyStatus,
    }),
  ),
});

/** An error recorded by the queue or the task log, as answers carry it (no stack, no cause). */
const recordedError = closed<Omit<SerializedError, 'stack' | 'cause'>>(
  {
    name: string,
    message: string,
    code: { type: 'string', description: 'stable, e.g. minicloud.container_failed' },
    details: json,
  },
  ['code', 'details'],
);

/** A container op, as the queue keeps it. */
const opInfo = closed<OpInfo>(
  {
    id: string,
    key: { ...containerName, description: 'the container' },
    type: { type: 'string', enum: [...CONTAINER_OPS] },
    payload: closed<ContainerOpPayload>({ image: string, durationMs: integer, fail: string }, [
      'image',
      'durationMs',
      'fail',
    ]),
    status: { type: 'string', enum: ['queued', 'running', 'succeeded', 'failed', 'cancelled'] },
    attempts: integer,
    createdAt: time,
    startedAt: time,
    finishedAt: time,
    result: closed<ContainerOpResult>(
      {
        name: string,
        state: { type: 'string', enum: ['created', 'running', 'stopped', 'deleted'] },
      },
      [],
      'the container afterwards (succeeded)',
    ),
    error: recordedError,
    cancelledBy: { type: 'string', description: 'the failed op whose stop policy cancelled it' },
    idempotencyKey: string,
    held: { type: 'boolean', description: 'accepted while its key is blocked' },
  },
  ['startedAt', 'finishedAt', 'result', 'error', 'cancelledBy', 'idempotencyKey', 'held'],
);

/** `GET /api/ops/{id}`. */
export const opResponse = opInfo;

/** `GET /api/queues`: the keys that are not idle. */
export const queuesResponse = closed<{ keys: { key: string; status: KeyStatus }[] }>({
  keys: arrayOf(closed<{ key: string; status: KeyStatus }>({ key: string, status: keyStatus })),
});

/** `GET /api/queues/{key}`. */
export const keyResponse = closed<KeyInfo>(
  {
    key: string,
    status: keyStatus,
    blockedBy: { type: 'string', description: 'the failed op that blocked the key' },
    running: opInfo,
    pending: { ...arrayOf(opInfo), description: 'ops waiting, in the order they will run' },
    held: { type: 'integer', description: 'how many pending ops wait behind the block' },
  },
  ['blockedBy', 'running', 'held'],
);

/** `POST /api/queues/{key}/resume`. */
export const resumeResponse = closed<{ ok: true; key: string; action: 'resume' }>({
  ok: { type: 'boolean', const: true },
  key: string,
  action: { type: 'string', const: 'resume' },
});

/** `POST /api/queues/{key}/discard`. */
export const discardResponse = closed<{
  ok: true;
  key: string;
  action: 'discard';
  cancelled: Awaited<ReturnType<Cloud['queue']['discard']>>;
}>({
  ok: { type: 'boolean', const: true },
  key: string,
  action: { type: 'string', const: 'discard' },
  cancelled: { ...strings, description: 'ids of the ops the discard cancelled' },
});

const taskState = { type: 'string', enum: [...taskStates] } as const;

/** `GET /api/flows`. */
export const flowsResponse = closed<{ flows: FlowSummary[] }>({
  flows: arrayOf(
    closed<FlowSummary>({
      flowId: string,
      name: string,
      state: taskState,
      createdAt: time,
      updatedAt: time,
    }),
  ),
});

/** One entry of a flow's history, as `GET /api/flows/{id}` answers it. */
export interface FlowHistoryAnswer {
  seq: number;
  task: string | null;
  state: LogEntry['state'];
  attempt: number | null;
  at: number;
  failure?: TaskFailure;
  result?: unknown;
}

/** What `GET /api/flows/{id}` answers. */
export interface FlowAnswer {
  flowId: string;
  name: string | null;
  state: LogEntry['state'] | null;
  createdAt: number;
  updatedAt: number;
  history: FlowHistoryAnswer[];
}

/** `GET /api/flows/{id}`. */
export const flowResponse = closed<FlowAnswer>({
  flowId: string,
  name: nullableString,
  state: nullable(taskState),
  createdAt: time,
  updatedAt: time,
  history: arrayOf(
    closed<FlowHistoryAnswer>(
      {
        seq: integer,
        task: { ...nullableString, description: 'null for the flow itself' },
        state: taskState,
        attempt: { type: ['integer', 'null'] },
        at: time,
        failure: closed<Omit<TaskFailure, 'stack' | 'cause'>>(
          {
            task: nullableString,
            name: string,
            message: string,
            code: string,
            details: json,
          },
          ['code', 'details'],
        ),
        result: { ...json, description: "the task's result (sensitive ones redacted)" },
      },
      ['failure', 'result'],
    ),
  ),
});

/** `GET /api/providers`: the provider tree. */
export const providersResponse = closed<{ nodes: ProviderNode[] }>({
  nodes: arrayOf(
    closed<ProviderNode>(
      {
        uuid: string,
        name: string,
        parent: { ...nullableString, description: 'the parent uuid; null for a root' },
        generation: integer,
        inventories: {
          type: 'object',
          description: 'by resource class, e.g. VGPU, VCPU, MEMORY_MB',
          additionalProperties: closed<ProviderNode['inventories'][string]>({
            total: integer,
            reserved: integer,
            allocationRatio: { type: 'number' },
            used: integer,
          }),
        },
      },
      ['generation'],
    ),
  ),
});

/** `GET /api/openapi.json`: an OpenAPI 3.1 document (open: extensions may appear anywhere). */
export const openApiResponse = {
  type: 'object',
  additionalProperties: true,
  required: ['openapi', 'info', 'paths'],
  properties: {
    openapi: { type: 'string', const: '3.1.0' },
    info: { type: 'object', additionalProperties: true },
    paths: { type: 'object', additionalProperties: true },
  },
} as const;

/** `202` of `POST /api/containers/:name/ops`: the op was queued. */
export const opAccepted = closed<{ opId: string; key: string; type: string }>({
  opId: { type: 'string', description: 'GET /api/ops/{id} has its status' },
  key: containerName,
  type: { type: 'string', enum: [...CONTAINER_OPS] },
});

/** `schema` as the answer of one status, with what that answer means (the document's words). */
export const answer = (schema: Schema, description: string): Schema => ({ ...schema, description });

/** A streamed answer (`text/event-stream`, `application/x-ndjson`). */
export const streamed = (type: string, description: string) =>
  ({ description, content: { [type]: { schema: { type: 'string' } } } }) as const;
