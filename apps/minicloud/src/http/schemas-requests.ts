/**
 * JSON schemas of the API's inputs: Fastify validates params, queries and bodies with Ajv before a
 * handler runs. Anything not described is refused (`additionalProperties: false`) and bodies are
 * not coerced; query values are strings, so numbers in queries are string patterns.
 */
import type { ArchiveLimits } from '@rigging/package-cache';
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

/** The schema of a route's path parameters: each one named is required. */
function pathParams<P extends Record<string, object>>(properties: P) {
  return { type: 'object', required: Object.keys(properties), properties } as const;
}

export const envParams = pathParams({ name: envName });

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

export const packageParams = pathParams(packageRef.properties);

export const containerParams = pathParams({ name: containerName });

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

export const opParams = pathParams({ id: { type: 'string', minLength: 1, maxLength: 200 } });

/** `GET /api/ops/{id}?waitMs=`: a client may ask to wait a minute at most. */
export const opQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    // 0 to 60000 (query values are strings: the schemas do not coerce types)
    waitMs: {
      type: 'string',
      pattern: '^(?:[0-9]|[1-9][0-9]{1,3}|[1-5][0-9]{4}|60000)$',
      description:
        'Wait up to this many milliseconds (0 to 60000) for the op to end: a long poll, answered with the op as it is then',
    },
  },
} as const;

export const keyParams = pathParams({ key: { type: 'string', minLength: 1, maxLength: 255 } });

export const flowParams = pathParams({ id: { type: 'string', minLength: 1, maxLength: 255 } });

export const flowsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'string', pattern: '^(?:[1-9][0-9]{0,2}|1000)$' },
    state: { type: 'string', enum: [...taskStates] },
  },
} as const;

/**
 * The request body of `POST /api/packages/{fqn}/{version}/archive` as the OpenAPI document
 * describes it: the archive's bytes, under one of `types`, within `limits`. (Fastify does not
 * validate it: the body is a buffer, bounded by the route's body limit and by the extraction.)
 */
export function archiveBody(
  types: readonly string[],
  limits: Readonly<Required<ArchiveLimits>>,
): {
  required: true;
  description: string;
  content: Record<string, { schema: Record<string, unknown> }>;
} {
  const MiB = 1024 * 1024;
  const description =
    `The archive's bytes (tar, tar.gz or zip; not multipart), at most ` +
    `${limits.maxArchiveBytes / MiB} MiB (${limits.maxArchiveBytes} bytes; more answers 413). ` +
    `Its files may add up to ${limits.maxExpandedBytes / MiB} MiB, in at most ` +
    `${limits.maxEntries} entries, ${limits.maxPathDepth} directories deep, names of at most ` +
    `${limits.maxNameLength} bytes, compressed at most ${limits.maxRatio}:1 (past a bound: 413); ` +
    'links, devices and paths that leave the package are refused (400).';
  const schema = { type: 'string', format: 'binary', maxLength: limits.maxArchiveBytes };
  return {
    required: true,
    description,
    content: Object.fromEntries(types.map((type) => [type, { schema }])),
  };
}
