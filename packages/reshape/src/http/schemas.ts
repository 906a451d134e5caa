/**
 * JSON Schemas of every request body and query string, per route and microversion, written
 * after Placement's API reference, and their validators, compiled with ajv once per handler.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { isUuid, MAX_INT } from '../model.js';
import { HttpError } from './errors.js';
import { atLeast, compare, type Version } from './microversion.js';
import { dict as nullProto } from './dict.js';

type Schema = Record<string, unknown>;

const UUID: Schema = { type: 'string', format: 'uuid' };
const RC_NAME = '^[A-Z0-9_]+$';
const CUSTOM_RC_NAME = '^CUSTOM_[A-Z0-9_]+$';
const GENERATION: Schema = { type: 'integer' };
const ID_STRING: Schema = { type: 'string', minLength: 1, maxLength: 255 };
const int = (minimum: number): Schema => ({ type: 'integer', minimum, maximum: MAX_INT });

/** A closed object: only `properties`, `required` ones required. */
function object(properties: Record<string, Schema>, required: string[] = []): Schema {
  return { type: 'object', properties, required, additionalProperties: false };
}

/** An object keyed by `keys` (a schema for names) with `value` values. */
function dict(keys: Schema, value: Schema, minProperties = 0): Schema {
  return { type: 'object', propertyNames: keys, additionalProperties: value, minProperties };
}

const INVENTORY_FIELDS: Record<string, Schema> = {
  total: int(1),
  reserved: int(0),
  min_unit: int(1),
  max_unit: int(1),
  step_size: int(1),
  allocation_ratio: { type: 'number', exclusiveMinimum: 0, maximum: 3.40282e38 },
};
const RC_KEY: Schema = { type: 'string', pattern: RC_NAME, maxLength: 255 };
/** An inventory in `PUT …/inventories` (a generation there is allowed, and ignored). */
const INVENTORY = object({ ...INVENTORY_FIELDS, resource_provider_generation: GENERATION }, [
  'total',
]);
const INVENTORY_DICT = dict(RC_KEY, INVENTORY);
const RESOURCES = dict(RC_KEY, int(1), 1);

/** A consumer's allocations in the 1.12+ (dict) form. */
function consumer(v: Version, nonEmpty: boolean): Schema {
  const properties: Record<string, Schema> = {
    allocations: dict(
      UUID,
      object({ resources: RESOURCES, generation: GENERATION }, ['resources']),
      nonEmpty ? 1 : 0,
    ),
    project_id: ID_STRING,
    user_id: ID_STRING,
  };
  const required = ['allocations', 'project_id', 'user_id'];
  if (atLeast(v, [1, 28])) {
    properties.consumer_generation = { anyOf: [int(0), { type: 'null' }] };
    required.push('consumer_generation');
  }
  // As Placement's schema: an unanchored key pattern (a key holding such characters), so other
  // keys pass unchecked.
  if (atLeast(v, [1, 34]))
    properties.mappings = {
      type: 'object',
      minProperties: 1,
      patternProperties: {
        [GROUP_SUFFIX_1_33]: { type: 'array', minItems: 1, items: UUID },
      },
    };
  if (atLeast(v, [1, 38])) {
    properties.consumer_type = { ...ID_STRING, pattern: '^[A-Z0-9_]+$' };
    required.push('consumer_type');
  }
  return object(properties, required);
}

/** Allocations of a consumer in the list form of microversions before 1.12. */
function listAllocations(v: Version): Schema {
  const item = object(
    { resource_provider: object({ uuid: UUID }, ['uuid']), resources: RESOURCES },
    ['resource_provider', 'resources'],
  );
  return object(
    {
      allocations: { type: 'array', items: item, minItems: 1 },
      project_id: ID_STRING,
      user_id: ID_STRING,
    },
    ['allocations', ...(atLeast(v, [1, 8]) ? ['project_id', 'user_id'] : [])],
  );
}

/** Body schemas, by the microversion each variant starts at. */
const BODIES = {
  createProvider: [
    [[1, 0], (v: Version) => provider(v, false)],
    [[1, 14], (v: Version) => provider(v, false)],
  ],
  updateProvider: [
    [[1, 0], (v: Version) => provider(v, true)],
    [[1, 14], (v: Version) => provider(v, true)],
  ],
  setInventories: [
    [
      [1, 0],
      () =>
        object({ inventories: INVENTORY_DICT, resource_provider_generation: GENERATION }, [
          'inventories',
          'resource_provider_generation',
        ]),
    ],
  ],
  createInventory: [
    [
      [1, 0],
      () =>
        object(
          {
            ...INVENTORY_FIELDS,
            resource_class: RC_KEY,
            resource_provider_generation: GENERATION,
          },
          ['total', 'resource_class'],
        ),
    ],
  ],
  updateInventory: [
    [
      [1, 0],
      () =>
        object({ ...INVENTORY_FIELDS, resource_provider_generation: GENERATION }, [
          'total',
          'resource_provider_generation',
        ]),
    ],
  ],
  setAggregates: [
    [[1, 1], () => ({ type: 'array', items: UUID, uniqueItems: true })],
    [
      [1, 19],
      () =>
        object(
          {
            aggregates: { type: 'array', items: UUID, uniqueItems: true },
            resource_provider_generation: GENERATION,
          },
          ['aggregates', 'resource_provider_generation'],
        ),
    ],
  ],
  setTraits: [
    [
      [1, 6],
      () =>
        object(
          {
            traits: { type: 'array', items: ID_STRING },
            resource_provider_generation: GENERATION,
          },
          ['traits', 'resource_provider_generation'],
        ),
    ],
  ],
  createResourceClass: [
    [[1, 2], () => object({ name: { ...ID_STRING, pattern: CUSTOM_RC_NAME } }, ['name'])],
  ],
  /** A custom resource class name in a path (`PUT /resource_classes/{name}`). */
  resourceClassName: [[[1, 2], () => ({ ...ID_STRING, pattern: CUSTOM_RC_NAME })]],
  setAllocations: [
    [[1, 0], listAllocations],
    [[1, 8], listAllocations],
    [[1, 12], (v: Version) => consumer(v, true)],
    [[1, 28], (v: Version) => consumer(v, false)],
    [[1, 34], (v: Version) => consumer(v, false)],
    [[1, 38], (v: Version) => consumer(v, false)],
  ],
  postAllocations: [
    [[1, 13], (v: Version) => dict(UUID, consumer(v, false), 1)],
    [[1, 28], (v: Version) => dict(UUID, consumer(v, false), 1)],
    [[1, 34], (v: Version) => dict(UUID, consumer(v, false), 1)],
    [[1, 38], (v: Version) => dict(UUID, consumer(v, false), 1)],
  ],
  reshape: [
    [[1, 30], reshaper],
    [[1, 34], reshaper],
    [[1, 38], reshaper],
  ],
} satisfies Record<string, [Version, (v: Version) => Schema][]>;

function provider(v: Version, update: boolean): Schema {
  const properties: Record<string, Schema> = {
    name: { type: 'string', minLength: 1, maxLength: 200 },
  };
  if (!update) properties.uuid = UUID;
  if (atLeast(v, [1, 14])) properties.parent_provider_uuid = { anyOf: [UUID, { type: 'null' }] };
  return object(properties, ['name']);
}

function reshaper(v: Version): Schema {
  const inventories = object(
    { inventories: INVENTORY_DICT, resource_provider_generation: int(0) },
    ['inventories', 'resource_provider_generation'],
  );
  return object(
    { inventories: dict(UUID, inventories, 1), allocations: dict(UUID, consumer(v, false)) },
    ['inventories', 'allocations'],
  );
}

const ANY: Schema = {};
const STRINGS: Schema = { type: 'array', items: { type: 'string' } };

/** Query-string schemas; values are strings, repeatable parameters arrays of strings. */
const QUERIES = {
  listProviders: [
    [[1, 0], providersQuery],
    [[1, 3], providersQuery],
    [[1, 4], providersQuery],
    [[1, 14], providersQuery],
    [[1, 18], providersQuery],
  ],
  allocationCandidates: [
    [[1, 10], candidatesQuery],
    [[1, 16], candidatesQuery],
    [[1, 17], candidatesQuery],
    [[1, 21], candidatesQuery],
    [[1, 25], candidatesQuery],
    [[1, 31], candidatesQuery],
    [[1, 33], candidatesQuery],
    [[1, 35], candidatesQuery],
    [[1, 36], candidatesQuery],
  ],
  usages: [
    [[1, 9], usagesQuery],
    [[1, 38], usagesQuery],
  ],
  listTraits: [
    [[1, 6], () => object({ name: { type: 'string' }, associated: { type: 'string' } })],
  ],
} satisfies Record<string, [Version, (v: Version) => Schema][]>;

/** Parameters that may be repeated in a query string (an array in its object). */
const REPEATABLE = new Set(['required', 'member_of']);

function providersQuery(v: Version): Schema {
  return object({
    name: { type: 'string', minLength: 1, maxLength: 200 },
    uuid: UUID,
    ...(atLeast(v, [1, 3]) ? { member_of: STRINGS } : {}),
    ...(atLeast(v, [1, 4]) ? { resources: { type: 'string' } } : {}),
    ...(atLeast(v, [1, 14]) ? { in_tree: UUID } : {}),
    ...(atLeast(v, [1, 18]) ? { required: STRINGS } : {}),
  });
}

/** A request group suffix: numbers before 1.33, then up to 64 of `[a-zA-Z0-9_-]`. */
const GROUP_SUFFIX = '[1-9][0-9]*';
const GROUP_SUFFIX_1_33 = '[a-zA-Z0-9_-]{1,64}';

function candidatesQuery(v: Version): Schema {
  if (!atLeast(v, [1, 25])) {
    const properties: Record<string, Schema> = { resources: { type: 'string' } };
    if (atLeast(v, [1, 16])) properties.limit = { type: 'string', pattern: '^[1-9][0-9]*$' };
    if (atLeast(v, [1, 17])) properties.required = STRINGS;
    if (atLeast(v, [1, 21])) properties.member_of = STRINGS;
    return object(properties, ['resources']);
  }
  // From 1.25, as Placement's: the group keys, suffixed or not, as key patterns (their values
  // are read, and refused, with the groups).
  const properties: Record<string, Schema> = {
    limit: { type: 'string', pattern: '^[1-9][0-9]*$' },
    group_policy: { type: 'string', enum: ['none', 'isolate'] },
  };
  if (atLeast(v, [1, 35])) properties.root_required = ANY;
  if (atLeast(v, [1, 36])) properties.same_subtree = ANY;
  const prefixes = ['resources', 'required', 'member_of'];
  if (atLeast(v, [1, 31])) prefixes.push('in_tree');
  const suffix = atLeast(v, [1, 33]) ? GROUP_SUFFIX_1_33 : GROUP_SUFFIX;
  return {
    type: 'object',
    properties,
    patternProperties: Object.fromEntries(prefixes.map((p) => [`^${p}(${suffix})?$`, ANY])),
    additionalProperties: false,
  };
}

function usagesQuery(v: Version): Schema {
  return object(
    {
      project_id: ID_STRING,
      user_id: ID_STRING,
      ...(atLeast(v, [1, 38])
        ? { consumer_type: { ...ID_STRING, pattern: '^([A-Z0-9_]+|all|unknown)$' } }
        : {}),
    },
    ['project_id'],
  );
}

/** The name of a body schema. @internal */
export type BodySchema = keyof typeof BODIES;
/** The name of a query-string schema. @internal */
export type QuerySchema = keyof typeof QUERIES;

type Variant = readonly [since: Version, build: (v: Version) => Schema];

/** Every validator, compiled once. @internal */
export interface Validators {
  /** Throws a 400 `JSON does not validate: …` unless `value` matches. */
  body(name: BodySchema, version: Version, value: unknown): void;
  /**
   * The query string as an object (repeatable parameters as arrays); throws a 400
   * `Invalid query string parameters: …` unless it matches.
   */
  query(name: QuerySchema, version: Version, params: URLSearchParams): Record<string, unknown>;
}

/** The variant of schema `name` that applies at `version`: the latest whose `since` it reaches. */
function pick(table: Record<string, readonly Variant[]>, name: string, version: Version): Variant {
  const variants = table[name]!;
  let out = variants[0]!;
  for (const variant of variants) if (compare(version, variant[0]) >= 0) out = variant;
  return out;
}

/** Compiles a variant on its first use with one Ajv (made on the first compile), then keeps it. */
function compiler(): (variant: Variant) => ValidateFunction {
  let ajv: Ajv | undefined;
  const compiled = new Map<Variant, ValidateFunction>();
  return (variant) => {
    let validate = compiled.get(variant);
    if (!validate) {
      if (!ajv) {
        ajv = new Ajv({ allErrors: false, verbose: true, strict: true });
        ajv.addFormat('uuid', { type: 'string', validate: (s: string) => isUuid(s) });
      }
      validate = ajv.compile(variant[1](variant[0]));
      compiled.set(variant, validate);
    }
    return validate;
  };
}

/**
 * Compiles every variant of every schema and returns how many: a check that each is valid under
 * Ajv's strict mode, which requests would otherwise meet one schema at a time. @internal
 */
export function compileEverySchema(): number {
  const validator = compiler();
  const variants = [...Object.values(BODIES), ...Object.values(QUERIES)].flat();
  for (const variant of variants) validator(variant);
  return variants.length;
}

/**
 * The validators of one handler: each schema is compiled on the first request that needs it
 * (compiling all of them at once cost the first request half a second of CPU), and kept by
 * this object (and so by its handler) only: nothing is cached at module level.
 * @internal
 */
export function validators(): Validators {
  const validator = compiler();
  return {
    body(name, version, value) {
      const validate = validator(pick(BODIES, name, version));
      if (!validate(value))
        throw new HttpError(400, `JSON does not validate: ${validationMessage(validate.errors)}`);
    },
    query(name, version, params) {
      const value = nullProto<unknown>();
      for (const key of new Set(params.keys()))
        value[key] = REPEATABLE.has(key) ? params.getAll(key) : params.get(key);
      const validate = validator(pick(QUERIES, name, version));
      if (!validate(value))
        throw new HttpError(
          400,
          `Invalid query string parameters: ${validationMessage(validate.errors)}`,
        );
      return value;
    },
  };
}

/** The most of a rejected value an error message echoes, in characters. */
const ECHO_LENGTH = 200;
/** The deepest an echoed value is shown; deeper arrays and objects print as `[...]`, `{...}`. */
const ECHO_DEPTH = 4;
/** The most items or properties shown of one array or object. */
const ECHO_ITEMS = 10;

/**
 * A rejected value as an error message shows it (a string in Python's quotes): at most
 * {@link ECHO_DEPTH} levels, {@link ECHO_ITEMS} items a level and {@link ECHO_LENGTH} characters,
 * so that a 100 KiB or 100,000-deep value neither comes back whole nor overflows the stack.
 */
function show(v: unknown): string {
  if (typeof v === 'string') return `'${clip(v)}'`;
  try {
    return clip(render(v, 0));
  } catch {
    return '(a value that cannot be shown)';
  }
}

function clip(text: string): string {
  return text.length > ECHO_LENGTH ? `${text.slice(0, ECHO_LENGTH)}...` : text;
}

function render(v: unknown, depth: number): string {
  if (Array.isArray(v)) {
    if (depth >= ECHO_DEPTH) return v.length ? '[...]' : '[]';
    const items = v.slice(0, ECHO_ITEMS).map((x) => render(x, depth + 1));
    if (v.length > ECHO_ITEMS) items.push('...');
    return `[${items.join(', ')}]`;
  }
  if (typeof v === 'object' && v !== null) {
    const keys = Object.keys(v);
    if (depth >= ECHO_DEPTH) return keys.length ? '{...}' : '{}';
    const items = keys
      .slice(0, ECHO_ITEMS)
      .map(
        (k) =>
          `${JSON.stringify(clip(k))}: ${render((v as Record<string, unknown>)[k], depth + 1)}`,
      );
    if (keys.length > ECHO_ITEMS) items.push('...');
    return `{${items.join(', ')}}`;
  }
  if (typeof v === 'string') return JSON.stringify(clip(v));
  return String(JSON.stringify(v));
}

/** The first error, worded as Python's jsonschema words it; never throws. */
function validationMessage(errors: ErrorObject[] | null | undefined): string {
  try {
    return `${describeFirst(errors)}${failedValidating(errors?.[0])}`;
  } catch {
    return 'invalid';
  }
}

/**
 * The second paragraph of Python jsonschema's message, which Placement's answers carry: the
 * keyword and where in the schema and the instance it failed (the instance shown bounded).
 */
function failedValidating(e: ErrorObject | undefined): string {
  if (!e) return '';
  const python = (pointer: string) =>
    pointer
      .split('/')
      .filter((p) => p !== '' && p !== '#')
      .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `['${p}']`))
      .join('');
  const schemaPath = python(e.schemaPath.split('/').slice(0, -1).join('/'));
  return `\n\nFailed validating '${e.keyword}' in schema${clip(schemaPath)}:\n\nOn instance${clip(python(e.instancePath))}:\n    ${show(e.data)}`;
}

/** The pattern of uuid keys in Placement's schemas. */
const UUID_KEY_PATTERN = '^[0-9a-fA-F-]{36}$';

/** The first error, worded as Python's jsonschema words it (Placement's messages). */
function describeFirst(errors: ErrorObject[] | null | undefined): string {
  const e = errors?.[0];
  if (!e) return 'invalid';
  const p = e.params as Record<string, unknown>;
  const at = e.instancePath ? ` at ${clip(e.instancePath)}` : '';
  // A key refused by `propertyNames`: Placement's schemas give key patterns as
  // patternProperties, which Python's jsonschema words this way.
  if (
    e.schemaPath.includes('/propertyNames/') &&
    (e.keyword === 'pattern' || e.keyword === 'format')
  ) {
    const pattern = e.keyword === 'pattern' ? String(p.pattern) : UUID_KEY_PATTERN;
    return `${show(e.data)} does not match any of the regexes: '${pattern}'${at}`;
  }
  switch (e.keyword) {
    case 'required':
      return `'${clip(String(p.missingProperty))}' is a required property${at}`;
    case 'additionalProperties': {
      // With patternProperties, Python's jsonschema names the patterns the key missed.
      const patterns = Object.keys(
        ((e.parentSchema as { patternProperties?: object } | undefined)?.patternProperties ??
          {}) as object,
      );
      return patterns.length
        ? `'${clip(String(p.additionalProperty))}' does not match any of the regexes: ${patterns
            .sort()
            .map((x) => `'${x}'`)
            .join(', ')}${at}`
        : `Additional properties are not allowed ('${clip(String(p.additionalProperty))}' was unexpected)${at}`;
    }
    case 'type':
      return `${show(e.data)} is not of type '${String(p.type)}'${at}`;
    case 'minimum':
    case 'exclusiveMinimum':
      return `${show(e.data)} is less than the minimum of ${String(p.limit)}${at}`;
    case 'maximum':
      return `${show(e.data)} is greater than the maximum of ${String(p.limit)}${at}`;
    case 'pattern':
      return `${show(e.data)} does not match '${String(p.pattern)}'${at}`;
    case 'format':
      return `${show(e.data)} is not a '${String(p.format)}'${at}`;
    case 'minProperties':
      return `${show(e.data)} does not have enough properties${at}`;
    case 'minLength':
    case 'minItems':
      return `${show(e.data)} is too short${at}`;
    case 'maxLength':
      return `${show(e.data)} is too long${at}`;
    case 'enum':
      // Python's repr of the list: strings in single quotes.
      return `${show(e.data)} is not one of [${(p.allowedValues as unknown[]).map((x) => show(x)).join(', ')}]${at}`;
    case 'uniqueItems':
      return `${show(e.data)} has non-unique elements${at}`;
    case 'propertyNames':
      return `${show(p.propertyName)} is not a valid key${at}`;
    default:
      return `${e.message ?? 'invalid'}${at}`;
  }
}
