/**
 * JSON schemas of the API's inputs (Fastify validates with Ajv before a handler runs; anything
 * not described is refused: `additionalProperties: false`, no type coercion of bodies).
 */
import { taskStates } from '@rigging/tasks';
import { CONTAINER_OPS, deployTaskNames } from '../cloud/index.js';

const ENV_NAME = '^[a-z0-9][a-z0-9-]{0,62}$';
const CONTAINER_NAME = '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$';
/** Package names and versions become directory names: no separators, no `..`. */
const FQN = '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$';
const VERSION = '^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$';
/** A relative path inside a package: segments of safe characters, no `.`/`..` segments. */
const FILE_PATH = '^(?!.*(^|/)\\.\\.?(/|$))[A-Za-z0-9._-][A-Za-z0-9._/-]{0,254}$';

export const envName = { type: 'string', pattern: ENV_NAME } as const;
export const containerName = { type: 'string', pattern: CONTAINER_NAME } as const;

const packageRef = {
  type: 'object',
  additionalProperties: false,
  required: ['fqn', 'version'],
  properties: {
    fqn: { type: 'string', pattern: FQN },
    version: { type: 'string', pattern: VERSION },
  },
} as const;

export const envParams = {
  type: 'object',
  required: ['name'],
  properties: { name: envName },
} as const;

export const deployBody = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'package'],
  properties: {
    name: envName,
    package: packageRef,
    faults: {
      type: 'object',
      additionalProperties: false,
      properties: {
        vmFailOnce: {
          type: 'array',
          maxItems: 16,
          uniqueItems: true,
          items: { type: 'string', pattern: '^vm-[0-9]{1,3}$' },
        },
        failStep: {
          anyOf: [{ type: 'null' }, { type: 'string', enum: deployTaskNames() }],
        },
      },
    },
  },
} as const;

export const uploadBody = {
  type: 'object',
  additionalProperties: false,
  required: ['fqn', 'version', 'files'],
  properties: {
    fqn: packageRef.properties.fqn,
    version: packageRef.properties.version,
    files: {
      type: 'array',
      minItems: 1,
      maxItems: 1000,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['path'],
        properties: {
          path: { type: 'string', pattern: FILE_PATH },
          /** UTF-8 text. */
          content: { type: 'string', maxLength: 4 * 1024 * 1024 },
          /** Bytes, base64. */
          base64: { type: 'string', maxLength: 6 * 1024 * 1024, pattern: '^[A-Za-z0-9+/=\\s]*$' },
        },
        oneOf: [{ required: ['content'] }, { required: ['base64'] }],
      },
    },
  },
} as const;

/** A package upload in the repository (`fqn/version/id`). */
export const packageRefSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['fqn', 'version', 'id'],
  properties: {
    fqn: { type: 'string' },
    version: { type: 'string' },
    id: { type: 'string' },
  },
} as const;

export const packageParams = {
  type: 'object',
  required: ['fqn', 'version'],
  properties: packageRef.properties,
} as const;

export const containerParams = {
  type: 'object',
  required: ['name'],
  properties: { name: containerName },
} as const;

export const opBody = {
  type: 'object',
  additionalProperties: false,
  required: ['type'],
  properties: {
    type: { type: 'string', enum: [...CONTAINER_OPS] },
    payload: {
      type: 'object',
      additionalProperties: false,
      properties: {
        image: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[^\\s]+$' },
        durationMs: { type: 'integer', minimum: 0, maximum: 60_000 },
        fail: { type: 'string', minLength: 1, maxLength: 500 },
      },
    },
  },
} as const;

export const opParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 200 } },
} as const;

export const keyParams = {
  type: 'object',
  required: ['key'],
  properties: { key: { type: 'string', minLength: 1, maxLength: 255 } },
} as const;

export const flowParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 255 } },
} as const;

export const flowsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'string', pattern: '^(?:[1-9][0-9]{0,2}|1000)$' },
    state: { type: 'string', enum: [...taskStates] },
  },
} as const;

// ------------------------------------------------------------------ responses

/** The body of every error answer: `{ error: { code, message } }`. */
export const errorBody = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: { type: 'string', description: 'stable, e.g. minicloud.unauthorized' },
        message: { type: 'string' },
        details: {},
        requestId: { type: 'string', description: 'the id the server log has this request under' },
      },
    },
  },
} as const;

/** A list of objects whose fields are described in the README (kept as the route returns them). */
const listOf = (key: string) =>
  ({
    type: 'object',
    required: [key],
    properties: { [key]: { type: 'array', items: { type: 'object', additionalProperties: true } } },
  }) as const;

/** `GET /api/health`. */
export const healthResponse = {
  type: 'object',
  additionalProperties: false,
  required: ['ok', 'uptimeMs', 'database', 'node', 'demoRunning', 'dashboardClients'],
  properties: {
    ok: { type: 'boolean' },
    uptimeMs: { type: 'integer' },
    database: { type: 'string', enum: ['sqlite', 'postgres', 'mysql'] },
    node: { type: 'string' },
    demoRunning: { type: 'boolean' },
    dashboardClients: { type: 'integer' },
  },
} as const;

/** `GET /api/environments`. */
export const environmentsResponse = listOf('environments');
/** `GET /api/containers`. */
export const containersResponse = listOf('containers');
/** `GET /api/queues`. */
export const queuesResponse = listOf('keys');
/** `GET /api/flows`. */
export const flowsResponse = listOf('flows');
/** `GET /api/providers`. */
export const providersResponse = listOf('nodes');

/** An object described in the README, sent as the route builds it. */
export const anyObject = { type: 'object', additionalProperties: true } as const;

/** `202` of `POST /api/containers/:name/ops`: the op was queued. */
export const opAccepted = {
  type: 'object',
  additionalProperties: false,
  required: ['opId', 'key', 'type'],
  properties: { opId: { type: 'string' }, key: { type: 'string' }, type: { type: 'string' } },
} as const;

/** A streamed answer (`text/event-stream`, `application/x-ndjson`). */
export const streamed = (type: string, description: string) =>
  ({ description, content: { [type]: { schema: { type: 'string' } } } }) as const;
