/**
 * `@rigging/reshape/http`: a Placement-compatible subset of the REST API over any
 * {@link ReshapeStore}, on plain `node:http` request/response objects (mountable in Express,
 * Fastify's raw handlers, or its own server).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { RiggingError } from '@rigging/core';
import type { ReshapeErrorCode } from './errors.js';
import {
  CONSUMER_TYPE_NAME,
  TRAIT_NAME,
  isStandardResourceClass,
  CUSTOM_NAME,
  MAX_INT,
  isUuid,
  normalizeUuid,
  type AllocationMap,
  type AllocationsInput,
  type Inventory,
  type InventoryInput,
  type ResourceProvider,
} from './model.js';
import type { ReshapeStore } from './store.js';
import { allocationCandidates } from './candidates.js';

/** The highest microversion served. */
export const MAX_MICROVERSION = '1.39';
const MAX: Version = [1, 39];
const ERROR_CODE_VERSION: Version = [1, 23];

type Version = readonly [number, number];

/** Who a request is from, as decided by {@link PlacementHandlerOptions.auth}. */
export interface AuthResult {
  roles: string[];
}

/**
 * A request handler. `body`: the request body when a framework has already read it (a string,
 * a Buffer or parsed JSON); otherwise it is read from `req`.
 */
export type PlacementHandler = (req: IncomingMessage, res: ServerResponse, body?: unknown) => void;

/** Options of {@link createPlacementHandler}. */
export interface PlacementHandlerOptions {
  /**
   * Token check. `undefined`: no check (every request is admin). `{ token }`: requests must send
   * `x-auth-token: <token>`. `{ validate }`: called with the token; return the caller's roles,
   * or `undefined` to refuse (401). Every endpoint but `GET /` requires the `admin` role (403).
   * @default undefined
   */
  auth?:
    | { token: string }
    | {
        validate(
          token: string,
          req: IncomingMessage,
        ): AuthResult | undefined | Promise<AuthResult | undefined>;
      };
  /** A prefix to strip, e.g. `/placement` when mounted there. @default '' */
  basePath?: string;
  /** Largest accepted request body. @default 16 MiB */
  maxBodyBytes?: number;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly code = 'placement.undefined_code',
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
  }
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  409: 'Conflict',
  413: 'Request Entity Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
};

const CODE_MAP: Partial<Record<ReshapeErrorCode, [number, string]>> = {
  'reshape.invalid_input': [400, 'placement.undefined_code'],
  'reshape.concurrent_update': [409, 'placement.concurrent_update'],
  'reshape.capacity_exceeded': [409, 'placement.undefined_code'],
  'reshape.invalid_allocation': [409, 'placement.undefined_code'],
  'reshape.inventory_in_use': [409, 'placement.inventory.inuse'],
  'reshape.provider_not_found': [404, 'placement.undefined_code'],
  'reshape.resource_class_not_found': [400, 'placement.undefined_code'],
  'reshape.resource_class_in_use': [409, 'placement.undefined_code'],
  'reshape.trait_not_found': [400, 'placement.undefined_code'],
  'reshape.consumer_not_found': [404, 'placement.undefined_code'],
  'reshape.provider_in_use': [409, 'placement.resource_provider.inuse'],
  'reshape.provider_has_children': [409, 'placement.resource_provider.cannot_delete_parent'],
  'reshape.duplicate': [409, 'placement.duplicate_name'],
};

/** Maps a store error to an HTTP error; `bodyRefs`: unknown providers named in a body are 400. */
function fromStoreError(error: unknown, bodyRefs = false): HttpError {
  if (!RiggingError.isInstance(error)) throw error;
  const mapped = CODE_MAP[error.code as ReshapeErrorCode];
  if (!mapped) throw error;
  const [status, code] = mapped;
  const body = bodyRefs && error.code === 'reshape.provider_not_found';
  return new HttpError(body ? 400 : status, error.message, code);
}

// ---------------------------------------------------------------------------------------------
// Body validation (JSON-schema-like, Placement's 400 "JSON does not validate").

function bad(detail: string): never {
  throw new HttpError(400, `JSON does not validate: ${detail}`);
}
type Obj = Record<string, unknown>;
function obj(
  v: unknown,
  at: string,
  allowed?: readonly string[],
  required: readonly string[] = [],
): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(`${at} is not of type 'object'`);
  const o = v as Obj;
  if (allowed)
    for (const k of Object.keys(o))
      if (!allowed.includes(k))
        bad(`Additional properties are not allowed ('${k}' was unexpected) in ${at}`);
  for (const k of required) if (!(k in o)) bad(`'${k}' is a required property in ${at}`);
  return o;
}
function integer(v: unknown, at: string, min: number, max = MAX_INT): number {
  if (typeof v !== 'number' || !Number.isInteger(v))
    bad(`${JSON.stringify(v) ?? 'undefined'} is not of type 'integer' at ${at}`);
  if (v < min) bad(`${v} is less than the minimum of ${min} at ${at}`);
  if (v > max) bad(`${v} is greater than the maximum of ${max} at ${at}`);
  return v;
}
function string(v: unknown, at: string, min = 1, max = 255): string {
  if (typeof v !== 'string')
    bad(`${JSON.stringify(v) ?? 'undefined'} is not of type 'string' at ${at}`);
  if (v.length < min || v.length > max) bad(`'${v}' has a bad length at ${at}`);
  return v;
}
function uuid(v: unknown, at: string): string {
  if (!isUuid(v)) bad(`${JSON.stringify(v) ?? 'undefined'} is not a 'uuid' at ${at}`);
  return normalizeUuid(v);
}
const RC = /^([A-Z0-9_]+|CUSTOM_[A-Z0-9_]+)$/;
function rcName(v: string, at: string): string {
  if (!RC.test(v) || v.length > 255) bad(`'${v}' does not match any of the regexes at ${at}`);
  return v;
}
const INVENTORY_FIELDS = [
  'total',
  'reserved',
  'min_unit',
  'max_unit',
  'step_size',
  'allocation_ratio',
] as const;
function inventory(v: unknown, at: string, extra: string[] = []): InventoryInput {
  const o = obj(v, at, [...INVENTORY_FIELDS, ...extra], ['total']);
  const out: InventoryInput = { total: integer(o.total, `${at}.total`, 1) };
  if (o.reserved !== undefined) out.reserved = integer(o.reserved, `${at}.reserved`, 0);
  if (o.min_unit !== undefined) out.minUnit = integer(o.min_unit, `${at}.min_unit`, 1);
  if (o.max_unit !== undefined) out.maxUnit = integer(o.max_unit, `${at}.max_unit`, 1);
  if (o.step_size !== undefined) out.stepSize = integer(o.step_size, `${at}.step_size`, 1);
  if (o.allocation_ratio !== undefined) {
    const r = o.allocation_ratio;
    if (typeof r !== 'number' || !Number.isFinite(r))
      bad(`${JSON.stringify(r)} is not of type 'number' at ${at}.allocation_ratio`);
    if (r <= 0 || r > 3.40282e38) bad(`allocation_ratio ${r} is out of range at ${at}`);
    out.allocationRatio = r;
  }
  return out;
}
function inventoryDict(v: unknown, at: string): Record<string, InventoryInput> {
  const o = obj(v, at);
  const out: Record<string, InventoryInput> = {};
  for (const [rc, inv] of Object.entries(o)) out[rcName(rc, at)] = inventory(inv, `${at}.${rc}`);
  return out;
}
function resources(v: unknown, at: string): Record<string, number> {
  const o = obj(v, at);
  if (Object.keys(o).length === 0) bad(`${at} does not have enough properties`);
  const out: Record<string, number> = {};
  for (const [rc, n] of Object.entries(o)) out[rcName(rc, at)] = integer(n, `${at}.${rc}`, 1);
  return out;
}
function allocationDict(v: unknown, at: string, minOne: boolean): AllocationMap {
  const o = obj(v, at);
  if (minOne && Object.keys(o).length === 0) bad(`${at} does not have enough properties`);
  const out: AllocationMap = {};
  for (const [rp, a] of Object.entries(o)) {
    const key = uuid(rp, `${at} key`);
    const entry = obj(a, `${at}.${rp}`, ['resources', 'generation'], ['resources']);
    out[key] = resources(entry.resources, `${at}.${rp}.resources`);
  }
  return out;
}
function consumerGeneration(o: Obj, at: string, v: Version): number | null | undefined {
  if (!atLeast(v, [1, 28])) return undefined;
  if (!('consumer_generation' in o)) bad(`'consumer_generation' is a required property in ${at}`);
  const g = o.consumer_generation;
  if (g === null) return null;
  return integer(g, `${at}.consumer_generation`, 0);
}
function consumerBody(o: Obj, at: string, v: Version, minOne: boolean): AllocationsInput {
  const fields = ['allocations', 'project_id', 'user_id'];
  if (atLeast(v, [1, 28])) fields.push('consumer_generation');
  if (atLeast(v, [1, 34])) fields.push('mappings');
  if (atLeast(v, [1, 38])) fields.push('consumer_type');
  obj(o, at, fields, [
    'allocations',
    'project_id',
    'user_id',
    ...(atLeast(v, [1, 38]) ? ['consumer_type'] : []),
  ]);
  let consumerType: string | undefined;
  if (o.consumer_type !== undefined) {
    consumerType = string(o.consumer_type, `${at}.consumer_type`);
    if (!CONSUMER_TYPE_NAME.test(consumerType))
      bad(`'${consumerType}' does not match '^[A-Z0-9_]+$' at ${at}.consumer_type`);
  }
  if (o.mappings !== undefined) obj(o.mappings, `${at}.mappings`);
  const gen = consumerGeneration(o, at, v);
  return {
    projectId: string(o.project_id, `${at}.project_id`),
    userId: string(o.user_id, `${at}.user_id`),
    ...(gen === undefined ? {} : { consumerGeneration: gen }),
    ...(consumerType === undefined ? {} : { consumerType }),
    allocations: allocationDict(o.allocations, `${at}.allocations`, minOne),
  };
}

/** `{ consumer uuid: consumer body }`, as `POST /allocations` and `POST /reshaper` take it. */
function consumersBody(o: Obj, prefix: string, v: Version): Record<string, AllocationsInput> {
  const out: Record<string, AllocationsInput> = {};
  for (const [consumer, entry] of Object.entries(o))
    out[uuid(consumer, 'consumer uuid')] = consumerBody(
      obj(entry, `${prefix}${consumer}`),
      `${prefix}${consumer}`,
      v,
      false,
    );
  return out;
}

// ---------------------------------------------------------------------------------------------
// Microversions.

function parseVersion(req: IncomingMessage): Version {
  const raw = req.headers['openstack-api-version'];
  const header = Array.isArray(raw) ? raw.join(',') : raw;
  let value: string | undefined;
  if (header) {
    for (const part of header.split(',')) {
      const [service, ver] = part.trim().split(/\s+/, 2);
      if (service?.toLowerCase() === 'placement') value = ver ?? '';
    }
  }
  if (value === undefined) {
    const legacy = req.headers['x-openstack-placement-api-version'];
    if (typeof legacy === 'string') value = legacy.trim();
  }
  if (value === undefined) return [1, 0];
  if (value === 'latest') return MAX;
  const m = /^([1-9]\d*|0)\.([1-9]\d*|0)$/.exec(value);
  if (!m) throw new HttpError(400, `invalid version string: ${value}`);
  const v: Version = [Number(m[1]), Number(m[2])];
  if (compare(v, [1, 0]) < 0 || compare(v, MAX) > 0) {
    throw new HttpError(406, `Unacceptable version header: ${value}`, 'placement.undefined_code');
  }
  return v;
}
function compare(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1];
}
function atLeast(v: Version, min: Version): boolean {
  return compare(v, min) >= 0;
}
const fmt = (v: Version): string => `${v[0]}.${v[1]}`;

// ---------------------------------------------------------------------------------------------
// Routing.

interface Ctx {
  req: IncomingMessage;
  version: Version;
  params: string[];
  query: URLSearchParams;
  body: unknown;
  base: string;
}
interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}
type Handler = (ctx: Ctx) => Promise<Reply>;
interface Route {
  pattern: RegExp;
  methods: Record<string, { min?: Version; max?: Version; handler: Handler; body?: boolean }>;
}

const SEG = '([^/]+)';
/** The project and user of consumers written without them (before 1.8), as Placement's default. */
const MISSING_CONSUMER_ID = '00000000-0000-0000-0000-000000000000';

/**
 * A `(req, res)` handler serving the Placement API from `store`. Request bodies are read from
 * `req` (do not parse them before).
 */
export function createPlacementHandler(
  store: ReshapeStore,
  options: PlacementHandlerOptions = {},
): PlacementHandler {
  const base = (options.basePath ?? '').replace(/\/+$/, '');
  if (base && !base.startsWith('/'))
    throw new TypeError(`basePath must start with /, got ${JSON.stringify(options.basePath)}`);
  const maxBody = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const routes = buildRoutes(store);

  async function authorize(req: IncomingMessage): Promise<void> {
    const auth = options.auth;
    if (!auth) return;
    const raw = req.headers['x-auth-token'];
    const token = Array.isArray(raw) ? raw[0] : raw;
    if (!token)
      throw new HttpError(
        401,
        'This server could not verify that you are authorized to access the document you requested.',
      );
    let result: AuthResult | undefined;
    if ('token' in auth) result = token === auth.token ? { roles: ['admin'] } : undefined;
    else result = await auth.validate(token, req);
    if (!result) throw new HttpError(401, 'The request you have made requires authentication.');
    if (!result.roles.includes('admin'))
      throw new HttpError(403, 'Policy does not allow this action to be performed.');
  }

  async function handle(
    req: IncomingMessage,
    res: ServerResponse,
    requestId: string,
    preread: unknown,
  ): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    let path = url.pathname;
    if (base) {
      if (path !== base && !path.startsWith(`${base}/`))
        throw new HttpError(404, 'The resource could not be found.');
      path = path.slice(base.length) || '/';
    }
    if (path.length > 1) path = path.replace(/\/+$/, '');
    let version: Version = [1, 0];
    const headers: Record<string, string> = {};
    try {
      version = parseVersion(req);
    } catch (error) {
      if (path === '/' && error instanceof HttpError && error.status !== 400) version = [1, 0];
      else throw error;
    }
    headers['openstack-api-version'] = `placement ${fmt(version)}`;
    headers.vary = 'openstack-api-version';
    const accept = req.headers.accept;
    if (accept && !/application\/json|\*\/\*|application\/\*/i.test(accept))
      throw Object.assign(new HttpError(406, 'Only application/json is provided'), { version });
    const method = (req.method ?? 'GET').toUpperCase();
    if (path === '/') {
      if (method !== 'GET' && method !== 'HEAD')
        throw new HttpError(
          405,
          `The method specified is not allowed for this resource.`,
          undefined,
          { allow: 'GET' },
        );
      send(
        res,
        200,
        versionDocument(base),
        { ...headers, 'openstack-request-id': requestId },
        version,
      );
      return;
    }
    await authorize(req);
    for (const route of routes) {
      const m = route.pattern.exec(path);
      if (!m) continue;
      const allowed = Object.entries(route.methods).filter(
        ([, r]) => (!r.min || atLeast(version, r.min)) && (!r.max || compare(version, r.max) <= 0),
      );
      if (allowed.length === 0) throw new HttpError(404, 'The resource could not be found.');
      const entry = allowed.find(([name]) => name === method)?.[1];
      if (!entry) {
        throw new HttpError(
          405,
          `The method specified is not allowed for this resource.`,
          undefined,
          {
            allow: allowed.map(([n]) => n).join(', '),
          },
        );
      }
      let body: unknown;
      if (entry.body) {
        const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        if (type !== 'application/json')
          throw new HttpError(
            415,
            `The media type ${type || 'None'} is not supported, use application/json`,
          );
        if (preread !== undefined && typeof preread !== 'string' && !Buffer.isBuffer(preread)) {
          body = preread;
        } else {
          const text =
            preread === undefined
              ? await readBody(req, maxBody)
              : String(preread as string | Buffer);
          try {
            body = JSON.parse(text);
          } catch (error) {
            throw new HttpError(400, `Malformed JSON: ${(error as Error).message}`);
          }
        }
      }
      const params = m.slice(1).map((p) => decodeURIComponent(p));
      const reply = await entry.handler({
        req,
        version,
        params,
        query: url.searchParams,
        body,
        base,
      });
      if (atLeast(version, [1, 15]) && method === 'GET') {
        headers['cache-control'] = 'no-cache';
        headers['last-modified'] = new Date().toUTCString();
      }
      send(
        res,
        reply.status,
        reply.body,
        { ...headers, ...reply.headers, 'openstack-request-id': requestId },
        version,
      );
      return;
    }
    throw new HttpError(404, 'The resource could not be found.');
  }

  return (req, res, preread) => {
    const requestId = `req-${randomUUID()}`;
    handle(req, res, requestId, preread).catch((error: unknown) => {
      let e: HttpError;
      let version: Version = [1, 0];
      try {
        version = parseVersion(req);
      } catch {
        // keep 1.0
      }
      if (error instanceof HttpError) e = error;
      else {
        try {
          e = fromStoreError(error);
        } catch {
          e = new HttpError(500, 'An unexpected error occurred.');
        }
      }
      const body: Record<string, unknown> = {
        status: e.status,
        title: TITLES[e.status] ?? 'Error',
        detail: e.detail,
        ...(atLeast(version, ERROR_CODE_VERSION) ? { code: e.code } : {}),
        request_id: requestId,
      };
      if (e.status === 406 && /version/i.test(e.detail)) {
        body.max_version = MAX_MICROVERSION;
        body.min_version = '1.0';
      }
      send(
        res,
        e.status,
        { errors: [body] },
        {
          ...e.headers,
          'openstack-request-id': requestId,
          vary: 'openstack-api-version',
          'openstack-api-version': `placement ${fmt(version)}`,
        },
        version,
      );
    });
  };
}

/** A `node:http` server around {@link createPlacementHandler}; call `listen()` yourself. */
export function createPlacementServer(
  store: ReshapeStore,
  options: PlacementHandlerOptions = {},
): Server {
  const handler = createPlacementHandler(store, options);
  return createServer((req, res) => handler(req, res));
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string>,
  _v: Version,
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  if (body === undefined || status === 204) {
    res.statusCode = status;
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('content-type', 'application/json');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

function readBody(req: IncomingMessage, max: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > max) {
        reject(new HttpError(413, `request body above ${max} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function versionDocument(base: string): unknown {
  return {
    versions: [
      {
        id: 'v1.0',
        max_version: MAX_MICROVERSION,
        min_version: '1.0',
        status: 'CURRENT',
        links: [{ rel: 'self', href: base }],
      },
    ],
  };
}

function aggregateList(v: unknown, at: string): string[] {
  if (!Array.isArray(v)) bad(`${JSON.stringify(v) ?? 'undefined'} is not of type 'array' at ${at}`);
  const seen = new Set<string>();
  for (const [i, a] of v.entries()) {
    const id = uuid(a, `${at}[${i}]`);
    if (seen.has(id)) bad(`${JSON.stringify(v)} has non-unique elements at ${at}`);
    seen.add(id);
  }
  return [...seen];
}

function aggregatesBody(r: { generation: number; aggregates: string[] }, v: Version): Obj {
  return atLeast(v, [1, 19])
    ? { aggregates: r.aggregates, resource_provider_generation: r.generation }
    : { aggregates: r.aggregates };
}

function providerJson(p: ResourceProvider, v: Version, base: string): Obj {
  const self = `${base}/resource_providers/${p.uuid}`;
  const links = [
    { rel: 'self', href: self },
    { rel: 'inventories', href: `${self}/inventories` },
    { rel: 'usages', href: `${self}/usages` },
  ];
  if (atLeast(v, [1, 1])) links.push({ rel: 'aggregates', href: `${self}/aggregates` });
  if (atLeast(v, [1, 6])) links.push({ rel: 'traits', href: `${self}/traits` });
  if (atLeast(v, [1, 11])) links.push({ rel: 'allocations', href: `${self}/allocations` });
  const out: Obj = { uuid: p.uuid, name: p.name, generation: p.generation, links };
  if (atLeast(v, [1, 14])) {
    out.parent_provider_uuid = p.parentProviderUuid;
    out.root_provider_uuid = p.rootProviderUuid;
  }
  return out;
}

function inventoryJson(i: Inventory): Obj {
  return {
    total: i.total,
    reserved: i.reserved,
    min_unit: i.minUnit,
    max_unit: i.maxUnit,
    step_size: i.stepSize,
    allocation_ratio: i.allocationRatio,
  };
}

function inventoriesJson(inv: Record<string, Inventory>): Obj {
  return Object.fromEntries(Object.entries(inv).map(([rc, i]) => [rc, inventoryJson(i)]));
}

function buildRoutes(store: ReshapeStore): Route[] {
  const rpUuid = (raw: string): string => {
    if (!isUuid(raw)) throw new HttpError(404, `No resource provider with uuid ${raw} found`);
    return normalizeUuid(raw);
  };
  const call = async <T>(fn: () => Promise<T>, bodyRefs = false): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      throw fromStoreError(error, bodyRefs);
    }
  };
  const provider = async (raw: string): Promise<ResourceProvider> => {
    const p = await call(() => store.getProvider(rpUuid(raw)));
    if (!p) throw new HttpError(404, `No resource provider with uuid ${raw} found`);
    return p;
  };
  const inventoriesReply = (generation: number, inv: Record<string, Inventory>): Reply => ({
    status: 200,
    body: { inventories: inventoriesJson(inv), resource_provider_generation: generation },
  });
  const rcLinks = (name: string, base: string): Obj => ({
    name,
    links: [{ rel: 'self', href: `${base}/resource_classes/${name}` }],
  });
  const V = (a: number, b: number): Version => [a, b];

  return [
    {
      pattern: /^\/resource_providers$/,
      methods: {
        GET: {
          handler: async ({ query, version, base }) => {
            const allowedKeys = ['name', 'uuid', 'member_of', 'resources', 'required', 'in_tree'];
            for (const k of new Set(query.keys())) {
              if (!allowedKeys.includes(k) || (k === 'in_tree' && !atLeast(version, [1, 14])))
                throw new HttpError(400, `Invalid query string parameters: '${k}' was unexpected`);
            }
            if (query.has('resources') || query.has('member_of') || query.has('required'))
              throw new HttpError(
                400,
                'resources, member_of and required filters are not supported by this server',
              );
            const filter: { name?: string; uuid?: string; inTree?: string } = {};
            const name = query.get('name');
            if (name !== null) filter.name = name;
            const u = query.get('uuid');
            if (u !== null) {
              if (!isUuid(u))
                throw new HttpError(400, `Invalid query string parameters: '${u}' is not a 'uuid'`);
              filter.uuid = u;
            }
            const inTree = query.get('in_tree');
            if (inTree !== null) {
              if (!isUuid(inTree))
                throw new HttpError(
                  400,
                  `Invalid query string parameters: '${inTree}' is not a 'uuid'`,
                );
              if (!(await store.getProvider(inTree)))
                return { status: 200, body: { resource_providers: [] } };
              filter.inTree = inTree;
            }
            const list = await call(() => store.listProviders(filter));
            return {
              status: 200,
              body: { resource_providers: list.map((p) => providerJson(p, version, base)) },
            };
          },
        },
        POST: {
          body: true,
          handler: async ({ body, version, base }) => {
            const fields = ['name', 'uuid'];
            if (atLeast(version, [1, 14])) fields.push('parent_provider_uuid');
            const o = obj(body, 'body', fields, ['name']);
            const name = string(o.name, 'name', 1, 200);
            const id = o.uuid === undefined ? undefined : uuid(o.uuid, 'uuid');
            let parent: string | null = null;
            if (o.parent_provider_uuid !== undefined && o.parent_provider_uuid !== null) {
              parent = uuid(o.parent_provider_uuid, 'parent_provider_uuid');
              if (!(await store.getProvider(parent)))
                throw new HttpError(400, `parent provider UUID cannot be found: ${parent}`);
            }
            const p = await call(() =>
              store.createProvider({
                name,
                ...(id ? { uuid: id } : {}),
                parentProviderUuid: parent,
              }),
            );
            const location = `${base}/resource_providers/${p.uuid}`;
            if (atLeast(version, [1, 20]))
              return { status: 200, body: providerJson(p, version, base), headers: { location } };
            return { status: 201, headers: { location } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params, version, base }) => ({
            status: 200,
            body: providerJson(await provider(params[0]!), version, base),
          }),
        },
        PUT: {
          body: true,
          handler: async ({ params, body, version, base }) => {
            const p = await provider(params[0]!);
            const fields = ['name'];
            if (atLeast(version, [1, 14])) fields.push('parent_provider_uuid');
            const o = obj(body, 'body', fields, ['name']);
            const name = string(o.name, 'name', 1, 200);
            let parent: string | null | undefined;
            if ('parent_provider_uuid' in o) {
              parent =
                o.parent_provider_uuid === null
                  ? null
                  : uuid(o.parent_provider_uuid, 'parent_provider_uuid');
              if (parent !== p.parentProviderUuid) {
                if (!atLeast(version, [1, 37]) && p.parentProviderUuid !== null)
                  throw new HttpError(
                    400,
                    'Unable to save resource provider: re-parenting a provider is not currently allowed.',
                  );
                if (parent === null && !atLeast(version, [1, 37]))
                  throw new HttpError(
                    400,
                    'Unable to save resource provider: un-parenting a provider is not currently allowed.',
                  );
                if (parent !== null && !(await store.getProvider(parent)))
                  throw new HttpError(400, `parent provider UUID cannot be found: ${parent}`);
              }
            }
            const updated = await call(() =>
              store.updateProvider(p.uuid, {
                name,
                ...(parent === undefined ? {} : { parentProviderUuid: parent }),
              }),
            );
            return { status: 200, body: providerJson(updated, version, base) };
          },
        },
        DELETE: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            await call(() => store.deleteProvider(p.uuid));
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/inventories$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const r = await call(() => store.getInventories(rpUuid(params[0]!)));
            return inventoriesReply(r.generation, r.inventories);
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body }) => {
            const p = await provider(params[0]!);
            const o = obj(
              body,
              'body',
              ['inventories', 'resource_provider_generation'],
              ['inventories', 'resource_provider_generation'],
            );
            const generation = integer(
              o.resource_provider_generation,
              'resource_provider_generation',
              0,
            );
            const inventories = inventoryDict(o.inventories, 'inventories');
            const r = await call(() => store.setInventories(p.uuid, { generation, inventories }));
            return inventoriesReply(r.generation, r.inventories);
          },
        },
        POST: {
          body: true,
          handler: async ({ params, body, base }) => {
            const p = await provider(params[0]!);
            const o = obj(
              body,
              'body',
              [...INVENTORY_FIELDS, 'resource_class', 'resource_provider_generation'],
              ['resource_class', 'resource_provider_generation', 'total'],
            );
            const rc = rcName(string(o.resource_class, 'resource_class'), 'resource_class');
            const generation = integer(
              o.resource_provider_generation,
              'resource_provider_generation',
              0,
            );
            const { resource_class: _rc, resource_provider_generation: _g, ...fields } = o;
            const inv = inventory(fields, 'body');
            const current = await call(() => store.getInventories(p.uuid));
            if (current.inventories[rc])
              throw new HttpError(
                409,
                `Update conflict: inventory for ${rc} already exists on resource provider ${p.uuid}`,
              );
            const r = await call(() =>
              store.setInventories(p.uuid, {
                generation,
                inventories: { ...current.inventories, [rc]: inv },
              }),
            );
            return {
              status: 201,
              body: {
                ...inventoryJson(r.inventories[rc]!),
                resource_provider_generation: r.generation,
              },
              headers: { location: `${base}/resource_providers/${p.uuid}/inventories/${rc}` },
            };
          },
        },
        DELETE: {
          min: V(1, 5),
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const current = await call(() => store.getInventories(p.uuid));
            await call(() =>
              store.setInventories(p.uuid, { generation: current.generation, inventories: {} }),
            );
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/inventories/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getInventories(p.uuid));
            const inv = r.inventories[params[1]!];
            if (!inv) throw new HttpError(404, `No inventory of class ${params[1]} for ${p.uuid}`);
            return {
              status: 200,
              body: { ...inventoryJson(inv), resource_provider_generation: r.generation },
            };
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body }) => {
            const p = await provider(params[0]!);
            const rc = params[1]!;
            const o = obj(
              body,
              'body',
              [...INVENTORY_FIELDS, 'resource_provider_generation'],
              ['resource_provider_generation', 'total'],
            );
            const generation = integer(
              o.resource_provider_generation,
              'resource_provider_generation',
              0,
            );
            const { resource_provider_generation: _g, ...fields } = o;
            const inv = inventory(fields, 'body');
            if (!RC.test(rc))
              throw new HttpError(
                400,
                `Unknown resource class in inventory for resource provider ${p.uuid}: ${rc}`,
              );
            const current = await call(() => store.getInventories(p.uuid));
            const r = await call(() =>
              store.setInventories(p.uuid, {
                generation,
                inventories: { ...current.inventories, [rc]: inv },
              }),
            );
            return {
              status: 200,
              body: {
                ...inventoryJson(r.inventories[rc]!),
                resource_provider_generation: r.generation,
              },
            };
          },
        },
        DELETE: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const rc = params[1]!;
            const current = await call(() => store.getInventories(p.uuid));
            if (!current.inventories[rc])
              throw new HttpError(404, `No inventory of class ${rc} found for delete`);
            const { [rc]: _gone, ...rest } = current.inventories;
            await call(() =>
              store.setInventories(p.uuid, { generation: current.generation, inventories: rest }),
            );
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/usages$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getUsages(p.uuid));
            return {
              status: 200,
              body: { usages: r.usages, resource_provider_generation: r.generation },
            };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/aggregates$`),
      methods: {
        GET: {
          min: V(1, 1),
          handler: async ({ params, version }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getAggregates(p.uuid));
            return { status: 200, body: aggregatesBody(r, version) };
          },
        },
        PUT: {
          min: V(1, 1),
          body: true,
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            let list: unknown;
            let generation: number | undefined;
            if (atLeast(version, [1, 19])) {
              const o = obj(
                body,
                'body',
                ['aggregates', 'resource_provider_generation'],
                ['aggregates', 'resource_provider_generation'],
              );
              generation = integer(
                o.resource_provider_generation,
                'resource_provider_generation',
                -MAX_INT,
              );
              list = o.aggregates;
            } else list = body;
            const aggregates = aggregateList(
              list,
              atLeast(version, [1, 19]) ? 'aggregates' : 'body',
            );
            const r = await call(() =>
              store.setAggregates(p.uuid, {
                aggregates,
                ...(generation === undefined ? {} : { generation }),
              }),
            );
            return { status: 200, body: aggregatesBody(r, version) };
          },
        },
      },
    },
    {
      pattern: /^\/allocation_candidates$/,
      methods: {
        GET: {
          min: V(1, 10),
          handler: async ({ query, version }) => {
            const at = (v: Version) => atLeast(version, v);
            const invalid = (detail: string): never => {
              throw new HttpError(400, `Invalid query string parameters: ${detail}`);
            };
            const allowedKeys = [
              'resources',
              ...(at([1, 16]) ? ['limit'] : []),
              ...(at([1, 17]) ? ['required'] : []),
              ...(at([1, 21]) ? ['member_of'] : []),
              ...(at([1, 25]) ? ['group_policy'] : []),
              ...(at([1, 31]) ? ['in_tree'] : []),
              ...(at([1, 35]) ? ['root_required'] : []),
              ...(at([1, 36]) ? ['same_subtree'] : []),
            ];
            for (const k of new Set(query.keys())) {
              if (
                at([1, 25]) &&
                /^(resources|required|member_of|in_tree)[A-Za-z0-9_-]{1,64}$/.test(k)
              )
                throw new HttpError(
                  400,
                  `numbered or suffixed request groups ('${k}') are not supported by this server`,
                );
              if (!allowedKeys.includes(k))
                invalid(`Additional properties are not allowed ('${k}' was unexpected)`);
            }
            for (const k of ['member_of', 'root_required', 'same_subtree'])
              if (query.has(k))
                throw new HttpError(400, `the ${k} filter is not supported by this server`);
            const raw = query.get('resources');
            if (raw === null) {
              if (at([1, 25]))
                throw new HttpError(
                  400,
                  'At least one request group (`resources` or `resources{$S}`) is required.',
                );
              invalid("'resources' is a required property");
            }
            const group = query.get('group_policy');
            if (group !== null && group !== 'none' && group !== 'isolate')
              invalid(`'${group}' is not one of ['none', 'isolate']`);
            const resources: Record<string, number> = {};
            const badly = `Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: ${raw}.`;
            for (const part of raw!.split(',')) {
              const m = /^\s*([^:\s]+)\s*:\s*(-?\d+)\s*$/.exec(part);
              if (!m) throw new HttpError(400, badly);
              const amount = Number(m[2]);
              if (!Number.isSafeInteger(amount) || amount < 1)
                throw new HttpError(
                  400,
                  `Requested resource ${m[1]} expected positive integer amount. Got: ${m[2]}.`,
                );
              resources[m[1]!] = amount;
            }
            const known = new Set(await store.listResourceClasses());
            for (const rc of Object.keys(resources))
              if (!known.has(rc) && !isStandardResourceClass(rc))
                throw new HttpError(
                  400,
                  `Invalid resource class in resources parameter: No such resource class ${rc}.`,
                );
            const required: string[][] = [];
            const forbidden: string[] = [];
            const customTraits = new Set(await store.listTraits());
            const checkTrait = (t: string): string => {
              if (!TRAIT_NAME.test(t) || t.length > 255)
                throw new HttpError(400, `Invalid query string parameters: bad trait '${t}'`);
              if (t.startsWith('CUSTOM_') && !customTraits.has(t))
                throw new HttpError(400, `No such trait(s): ${t}.`);
              return t;
            };
            for (const value of query.getAll('required')) {
              if (at([1, 39]) && value.startsWith('in:')) {
                required.push(value.slice(3).split(',').map(checkTrait));
                continue;
              }
              for (const t of value.split(',')) {
                if (t.startsWith('!') && at([1, 22])) forbidden.push(checkTrait(t.slice(1)));
                else required.push([checkTrait(t)]);
              }
            }
            let limit: number | undefined;
            const l = query.get('limit');
            if (l !== null) {
              if (!/^[1-9][0-9]*$/.test(l)) invalid(`'${l}' does not match '^[1-9][0-9]*$'`);
              limit = Number(l);
            }
            const inTree = query.get('in_tree');
            if (inTree !== null) {
              if (!isUuid(inTree)) invalid(`'${inTree}' is not a 'uuid'`);
              if (!(await store.getProvider(inTree)))
                return {
                  status: 200,
                  body: { allocation_requests: [], provider_summaries: {} },
                };
            }
            const c = await call(() =>
              allocationCandidates(store, {
                resources,
                required,
                forbidden,
                nested: at([1, 29]),
                ...(limit === undefined ? {} : { limit }),
                ...(inTree === null ? {} : { inTree: normalizeUuid(inTree) }),
              }),
            );
            const allocation_requests = c.allocationRequests.map((r) => {
              if (!at([1, 12]))
                return {
                  allocations: Object.entries(r).map(([uuid, res]) => ({
                    resource_provider: { uuid },
                    resources: res,
                  })),
                };
              const out: Obj = {
                allocations: Object.fromEntries(
                  Object.entries(r).map(([uuid, res]) => [uuid, { resources: res }]),
                ),
              };
              if (at([1, 34])) out.mappings = { '': Object.keys(r).sort() };
              return out;
            });
            const provider_summaries: Obj = {};
            for (const [uuid, sum] of c.summaries) {
              const res: Obj = {};
              for (const [rc, v] of Object.entries(sum.resources))
                if (at([1, 27]) || rc in resources) res[rc] = v;
              const entry: Obj = { resources: res };
              if (at([1, 17])) entry.traits = sum.traits;
              if (at([1, 29])) {
                entry.parent_provider_uuid = sum.provider.parentProviderUuid;
                entry.root_provider_uuid = sum.provider.rootProviderUuid;
              }
              provider_summaries[uuid] = entry;
            }
            return { status: 200, body: { allocation_requests, provider_summaries } };
          },
        },
      },
    },
    {
      pattern: /^\/usages$/,
      methods: {
        GET: {
          min: V(1, 9),
          handler: async ({ query, version }) => {
            const byType = atLeast(version, [1, 38]);
            const allowedKeys = ['project_id', 'user_id', ...(byType ? ['consumer_type'] : [])];
            for (const k of new Set(query.keys()))
              if (!allowedKeys.includes(k))
                throw new HttpError(
                  400,
                  `Invalid query string parameters: Additional properties are not allowed ('${k}' was unexpected)`,
                );
            const param = (k: string): string | undefined => {
              const v = query.get(k);
              if (v === null) return undefined;
              if (v.length < 1 || v.length > 255)
                throw new HttpError(
                  400,
                  `Invalid query string parameters: '${k}' has a bad length`,
                );
              return v;
            };
            const projectId = param('project_id');
            if (projectId === undefined)
              throw new HttpError(
                400,
                "Invalid query string parameters: 'project_id' is a required property",
              );
            const userId = param('user_id');
            const consumerType = param('consumer_type');
            if (
              consumerType !== undefined &&
              consumerType !== 'all' &&
              consumerType !== 'unknown' &&
              !CONSUMER_TYPE_NAME.test(consumerType)
            )
              throw new HttpError(
                400,
                `Invalid query string parameters: '${consumerType}' does not match the consumer type pattern`,
              );
            const t = await call(() =>
              store.getTotalUsages({ projectId, ...(userId === undefined ? {} : { userId }) }),
            );
            if (!byType) return { status: 200, body: { usages: t.usages } };
            const usages: Obj = {};
            const group = (u: { usages: Record<string, number>; consumerCount: number }) => ({
              ...u.usages,
              consumer_count: u.consumerCount,
            });
            if (consumerType === 'all') {
              if (t.consumerCount > 0) usages.all = group(t);
            } else if (consumerType !== undefined) {
              const g = t.byConsumerType[consumerType];
              if (g) usages[consumerType] = group(g);
            } else {
              for (const [type, g] of Object.entries(t.byConsumerType)) usages[type] = group(g);
            }
            return { status: 200, body: { usages } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/allocations$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getProviderAllocations(p.uuid));
            const allocations = Object.fromEntries(
              Object.entries(r.allocations).map(([c, res]) => [c, { resources: res }]),
            );
            return {
              status: 200,
              body: { allocations, resource_provider_generation: r.generation },
            };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/traits$`),
      methods: {
        GET: {
          min: V(1, 6),
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getTraits(p.uuid));
            return {
              status: 200,
              body: { traits: r.traits, resource_provider_generation: r.generation },
            };
          },
        },
        PUT: {
          min: V(1, 6),
          body: true,
          handler: async ({ params, body }) => {
            const p = await provider(params[0]!);
            const o = obj(
              body,
              'body',
              ['traits', 'resource_provider_generation'],
              ['traits', 'resource_provider_generation'],
            );
            if (!Array.isArray(o.traits)) bad(`traits is not of type 'array'`);
            const traits = (o.traits as unknown[]).map((t, i) => string(t, `traits[${i}]`));
            const generation = integer(
              o.resource_provider_generation,
              'resource_provider_generation',
              0,
            );
            const r = await call(() => store.setTraits(p.uuid, { generation, traits }));
            return {
              status: 200,
              body: { traits: r.traits, resource_provider_generation: r.generation },
            };
          },
        },
        DELETE: {
          min: V(1, 6),
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getTraits(p.uuid));
            await call(() => store.setTraits(p.uuid, { generation: r.generation, traits: [] }));
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: /^\/traits$/,
      methods: {
        GET: {
          min: V(1, 6),
          handler: async ({ query }) => {
            let traits = await call(() => store.listTraits());
            const name = query.get('name');
            if (name?.startsWith('startswith:'))
              traits = traits.filter((t) => t.startsWith(name.slice(11)));
            else if (name?.startsWith('in:')) {
              const set = new Set(name.slice(3).split(','));
              traits = traits.filter((t) => set.has(t));
            }
            return { status: 200, body: { traits } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/traits/${SEG}$`),
      methods: {
        GET: {
          min: V(1, 6),
          handler: async ({ params }) => {
            const traits = await call(() => store.listTraits());
            if (!traits.includes(params[0]!))
              throw new HttpError(404, `No such trait(s): ${params[0]}`);
            return { status: 204 };
          },
        },
        PUT: {
          min: V(1, 6),
          handler: async ({ params, base }) => {
            const name = params[0]!;
            if (!CUSTOM_NAME.test(name))
              throw new HttpError(
                400,
                `The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix "CUSTOM_" and use following characters: "A"-"Z", "0"-"9" and "_"`,
              );
            const created = await call(() => store.createTrait(name));
            return { status: created ? 201 : 204, headers: { location: `${base}/traits/${name}` } };
          },
        },
      },
    },
    {
      pattern: /^\/resource_classes$/,
      methods: {
        GET: {
          min: V(1, 2),
          handler: async ({ base }) => ({
            status: 200,
            body: {
              resource_classes: (await call(() => store.listResourceClasses())).map((n) =>
                rcLinks(n, base),
              ),
            },
          }),
        },
        POST: {
          min: V(1, 2),
          body: true,
          handler: async ({ body, base }) => {
            const o = obj(body, 'body', ['name'], ['name']);
            const name = string(o.name, 'name');
            if (!CUSTOM_NAME.test(name)) bad(`'${name}' does not match '^CUSTOM_[A-Z0-9_]+$'`);
            const created = await call(() => store.createResourceClass(name));
            if (!created)
              throw new HttpError(
                409,
                `Conflicting resource class already exists: ${name}`,
                'placement.duplicate_name',
              );
            return { status: 201, headers: { location: `${base}/resource_classes/${name}` } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_classes/${SEG}$`),
      methods: {
        GET: {
          min: V(1, 2),
          handler: async ({ params, base }) => {
            const all = await call(() => store.listResourceClasses());
            if (!all.includes(params[0]!))
              throw new HttpError(404, `No such resource class ${params[0]}.`);
            return { status: 200, body: rcLinks(params[0]!, base) };
          },
        },
        PUT: {
          min: V(1, 7),
          handler: async ({ params, base }) => {
            const name = params[0]!;
            if (!CUSTOM_NAME.test(name)) bad(`'${name}' does not match '^CUSTOM_[A-Z0-9_]+$'`);
            const created = await call(() => store.createResourceClass(name));
            return {
              status: created ? 201 : 204,
              headers: { location: `${base}/resource_classes/${name}` },
            };
          },
        },
        DELETE: {
          min: V(1, 2),
          handler: async ({ params }) => {
            const name = params[0]!;
            const all = await call(() => store.listResourceClasses());
            if (!all.includes(name)) throw new HttpError(404, `No such resource class ${name}.`);
            if (!CUSTOM_NAME.test(name))
              throw new HttpError(
                400,
                `Cannot delete standard resource class ${name}: Cannot delete standard resource class.`,
              );
            await call(() => store.deleteResourceClass(name));
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/allocations/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params, version }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer)) return { status: 200, body: { allocations: {} } };
            const a = await call(() => store.getAllocations(consumer));
            if (!a) return { status: 200, body: { allocations: {} } };
            const allocations: Obj = {};
            for (const [rp, res] of Object.entries(a.allocations)) {
              const p = await store.getProvider(rp);
              allocations[rp] = { generation: p?.generation ?? 0, resources: res };
            }
            const out: Obj = { allocations };
            if (atLeast(version, [1, 12])) {
              out.project_id = a.projectId;
              out.user_id = a.userId;
            }
            if (atLeast(version, [1, 28])) out.consumer_generation = a.consumerGeneration;
            if (atLeast(version, [1, 38])) out.consumer_type = a.consumerType ?? 'unknown';
            return { status: 200, body: out };
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body, version }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer)) throw new HttpError(400, `Malformed consumer_uuid: ${consumer}`);
            let input: AllocationsInput;
            if (atLeast(version, [1, 12])) {
              const o = obj(body, 'body');
              input = consumerBody(o, 'body', version, !atLeast(version, [1, 28]));
            } else {
              const o = obj(
                body,
                'body',
                ['allocations', 'project_id', 'user_id'],
                ['allocations', ...(atLeast(version, [1, 8]) ? ['project_id', 'user_id'] : [])],
              );
              if (!Array.isArray(o.allocations) || o.allocations.length === 0)
                bad(`allocations is not a non-empty 'array'`);
              const allocations: AllocationMap = {};
              for (const [i, item] of (o.allocations as unknown[]).entries()) {
                const it = obj(
                  item,
                  `allocations[${i}]`,
                  ['resource_provider', 'resources'],
                  ['resource_provider', 'resources'],
                );
                const rp = obj(
                  it.resource_provider,
                  `allocations[${i}].resource_provider`,
                  ['uuid'],
                  ['uuid'],
                );
                allocations[uuid(rp.uuid, `allocations[${i}].resource_provider.uuid`)] = resources(
                  it.resources,
                  `allocations[${i}].resources`,
                );
              }
              input = {
                projectId:
                  o.project_id === undefined
                    ? MISSING_CONSUMER_ID
                    : string(o.project_id, 'project_id'),
                userId:
                  o.user_id === undefined ? MISSING_CONSUMER_ID : string(o.user_id, 'user_id'),
                allocations,
              };
            }
            await call(() => store.setAllocations(consumer, input), true);
            return { status: 204 };
          },
        },
        DELETE: {
          handler: async ({ params }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer))
              throw new HttpError(404, `No allocations for consumer '${consumer}'`);
            try {
              await store.deleteAllocations(consumer);
            } catch (error) {
              if (RiggingError.hasCode(error, 'reshape.consumer_not_found'))
                throw new HttpError(404, `No allocations for consumer '${consumer}'`);
              throw fromStoreError(error);
            }
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: /^\/allocations$/,
      methods: {
        POST: {
          min: V(1, 13),
          body: true,
          handler: async ({ body, version }) => {
            const o = obj(body, 'body');
            if (Object.keys(o).length === 0) bad('body does not have enough properties');
            const allocations = consumersBody(o, '', version);
            await call(() => store.reshape({ allocations }), true);
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: /^\/reshaper$/,
      methods: {
        POST: {
          min: V(1, 30),
          body: true,
          handler: async ({ body, version }) => {
            const o = obj(
              body,
              'body',
              ['inventories', 'allocations'],
              ['inventories', 'allocations'],
            );
            const inventories: Record<
              string,
              { generation: number; inventories: Record<string, InventoryInput> }
            > = {};
            const invs = obj(o.inventories, 'inventories');
            if (Object.keys(invs).length === 0) bad(`inventories does not have enough properties`);
            for (const [rp, entry] of Object.entries(invs)) {
              const e = obj(
                entry,
                `inventories.${rp}`,
                ['inventories', 'resource_provider_generation'],
                ['inventories', 'resource_provider_generation'],
              );
              inventories[uuid(rp, 'inventories key')] = {
                generation: integer(
                  e.resource_provider_generation,
                  `inventories.${rp}.resource_provider_generation`,
                  0,
                ),
                inventories: inventoryDict(e.inventories, `inventories.${rp}.inventories`),
              };
            }
            const allocations = consumersBody(
              obj(o.allocations, 'allocations'),
              'allocations.',
              version,
            );
            await call(async () => {
              for (const rp of Object.keys(inventories)) {
                if (!(await store.getProvider(rp)))
                  throw new HttpError(
                    400,
                    `Resource provider '${rp}' in inventories not found`,
                    'placement.resource_provider.not_found',
                  );
              }
              return store.reshape({ inventories, allocations });
            }, true);
            return { status: 204 };
          },
        },
      },
    },
  ];
}
