/**
 * `@rigging/reshape/http`: a Placement-compatible subset of the REST API over any
 * {@link ReshapeStore}, on plain `node:http` request/response objects (mountable in Express,
 * Fastify's raw handlers, or its own server).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { RiggingError } from '@rigging/core';
import { fromStoreError, HttpError, TITLES } from './http/errors.js';
import {
  atLeast,
  compare,
  fmt,
  MAX_MICROVERSION,
  parseVersion,
  type Version,
} from './http/microversion.js';
import { validators } from './http/schemas.js';
import {
  TRAIT_NAME,
  isStandardResourceClass,
  CUSTOM_NAME,
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

export { MAX_MICROVERSION } from './http/microversion.js';
const ERROR_CODE_VERSION: Version = [1, 23];

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

// ---------------------------------------------------------------------------------------------
// Validated bodies to store inputs (see ./http/schemas.ts for what each body may hold).

type Obj = Record<string, unknown>;

function toInventory(o: Obj): InventoryInput {
  const out: InventoryInput = { total: o.total as number };
  if (o.reserved !== undefined) out.reserved = o.reserved as number;
  if (o.min_unit !== undefined) out.minUnit = o.min_unit as number;
  if (o.max_unit !== undefined) out.maxUnit = o.max_unit as number;
  if (o.step_size !== undefined) out.stepSize = o.step_size as number;
  if (o.allocation_ratio !== undefined) out.allocationRatio = o.allocation_ratio as number;
  return out;
}
function toInventories(o: Obj): Record<string, InventoryInput> {
  return Object.fromEntries(Object.entries(o).map(([rc, inv]) => [rc, toInventory(inv as Obj)]));
}
/** A consumer body in the 1.12+ form. */
function toConsumer(o: Obj, v: Version): AllocationsInput {
  const allocations: AllocationMap = {};
  for (const [rp, entry] of Object.entries(o.allocations as Record<string, Obj>))
    allocations[normalizeUuid(rp)] = { ...(entry.resources as Record<string, number>) };
  return {
    projectId: o.project_id as string,
    userId: o.user_id as string,
    ...(atLeast(v, [1, 28]) ? { consumerGeneration: o.consumer_generation as number | null } : {}),
    ...(o.consumer_type === undefined ? {} : { consumerType: o.consumer_type as string }),
    allocations,
  };
}
/** A consumer body in the list form of microversions before 1.12. */
function toListConsumer(o: Obj): AllocationsInput {
  const allocations: AllocationMap = {};
  for (const item of o.allocations as { resource_provider: { uuid: string }; resources: Obj }[])
    allocations[normalizeUuid(item.resource_provider.uuid)] = {
      ...(item.resources as Record<string, number>),
    };
  return {
    projectId: (o.project_id as string | undefined) ?? MISSING_CONSUMER_ID,
    userId: (o.user_id as string | undefined) ?? MISSING_CONSUMER_ID,
    allocations,
  };
}
/** `{ consumer uuid: consumer body }`, as `POST /allocations` and `POST /reshaper` take it. */
function toConsumers(o: Obj, v: Version): Record<string, AllocationsInput> {
  const out: Record<string, AllocationsInput> = {};
  for (const [consumer, entry] of Object.entries(o))
    out[normalizeUuid(consumer)] = toConsumer(entry as Obj, v);
  return out;
}

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
  const check = validators();

  return [
    {
      pattern: /^\/resource_providers$/,
      methods: {
        GET: {
          handler: async ({ query, version, base }) => {
            const q = check.query('listProviders', version, query) as {
              name?: string;
              uuid?: string;
              in_tree?: string;
            };
            if (query.has('resources') || query.has('member_of') || query.has('required'))
              throw new HttpError(
                400,
                'resources, member_of and required filters are not supported by this server',
              );
            const filter: { name?: string; uuid?: string; inTree?: string } = {};
            if (q.name !== undefined) filter.name = q.name;
            if (q.uuid !== undefined) filter.uuid = q.uuid;
            const inTree = q.in_tree;
            if (inTree !== undefined) {
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
            check.body('createProvider', version, body);
            const o = body as { name: string; uuid?: string; parent_provider_uuid?: string | null };
            const name = o.name;
            const id = o.uuid === undefined ? undefined : normalizeUuid(o.uuid);
            let parent: string | null = null;
            if (o.parent_provider_uuid !== undefined && o.parent_provider_uuid !== null) {
              parent = normalizeUuid(o.parent_provider_uuid);
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
            check.body('updateProvider', version, body);
            const o = body as { name: string; parent_provider_uuid?: string | null };
            const name = o.name;
            let parent: string | null | undefined;
            if (o.parent_provider_uuid !== undefined) {
              parent =
                o.parent_provider_uuid === null ? null : normalizeUuid(o.parent_provider_uuid);
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
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            check.body('setInventories', version, body);
            const o = body as { inventories: Obj; resource_provider_generation: number };
            const generation = o.resource_provider_generation;
            const inventories = toInventories(o.inventories);
            const r = await call(() => store.setInventories(p.uuid, { generation, inventories }));
            return inventoriesReply(r.generation, r.inventories);
          },
        },
        POST: {
          body: true,
          handler: async ({ params, body, base, version }) => {
            const p = await provider(params[0]!);
            check.body('createInventory', version, body);
            const o = body as Obj;
            const rc = o.resource_class as string;
            const generation = o.resource_provider_generation as number;
            const inv = toInventory(o);
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
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            const rc = params[1]!;
            check.body('updateInventory', version, body);
            const o = body as Obj;
            const generation = o.resource_provider_generation as number;
            const inv = toInventory(o);
            if (!/^[A-Z0-9_]+$/.test(rc) || rc.length > 255)
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
            check.body('setAggregates', version, body);
            let list: string[];
            let generation: number | undefined;
            if (atLeast(version, [1, 19])) {
              const o = body as { aggregates: string[]; resource_provider_generation: number };
              generation = o.resource_provider_generation;
              list = o.aggregates;
            } else list = body as string[];
            const aggregates = [...new Set(list.map((a) => normalizeUuid(a)))];
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
            for (const k of new Set(query.keys()))
              if (
                at([1, 25]) &&
                /^(resources|required|member_of|in_tree)[A-Za-z0-9_-]{1,64}$/.test(k)
              )
                throw new HttpError(
                  400,
                  `numbered or suffixed request groups ('${k}') are not supported by this server`,
                );
            const q = check.query('allocationCandidates', version, query) as {
              resources?: string;
              required?: string[];
              limit?: string;
              in_tree?: string;
            };
            for (const k of ['member_of', 'root_required', 'same_subtree'])
              if (query.has(k))
                throw new HttpError(400, `the ${k} filter is not supported by this server`);
            const raw = q.resources;
            if (raw === undefined)
              throw new HttpError(
                400,
                'At least one request group (`resources` or `resources{$S}`) is required.',
              );
            const resources: Record<string, number> = {};
            const badly = `Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: ${raw}.`;
            for (const part of raw.split(',')) {
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
            for (const value of q.required ?? []) {
              if (at([1, 39]) && value.startsWith('in:')) {
                required.push(value.slice(3).split(',').map(checkTrait));
                continue;
              }
              for (const t of value.split(',')) {
                if (t.startsWith('!') && at([1, 22])) forbidden.push(checkTrait(t.slice(1)));
                else required.push([checkTrait(t)]);
              }
            }
            const limit = q.limit === undefined ? undefined : Number(q.limit);
            const inTree = q.in_tree;
            if (inTree !== undefined) {
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
                ...(inTree === undefined ? {} : { inTree: normalizeUuid(inTree) }),
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
            const q = check.query('usages', version, query) as {
              project_id: string;
              user_id?: string;
              consumer_type?: string;
            };
            const { project_id: projectId, user_id: userId, consumer_type: consumerType } = q;
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
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            check.body('setTraits', version, body);
            const { traits, resource_provider_generation: generation } = body as {
              traits: string[];
              resource_provider_generation: number;
            };
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
          handler: async ({ query, version }) => {
            const { name } = check.query('listTraits', version, query) as { name?: string };
            let traits = await call(() => store.listTraits());
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
          handler: async ({ body, base, version }) => {
            check.body('createResourceClass', version, body);
            const { name } = body as { name: string };
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
          handler: async ({ params, base, version }) => {
            const name = params[0]!;
            check.body('resourceClassName', version, name);
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
            check.body('setAllocations', version, body);
            const input = atLeast(version, [1, 12])
              ? toConsumer(body as Obj, version)
              : toListConsumer(body as Obj);
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
            check.body('postAllocations', version, body);
            const allocations = toConsumers(body as Obj, version);
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
            check.body('reshape', version, body);
            const o = body as {
              inventories: Record<
                string,
                { inventories: Obj; resource_provider_generation: number }
              >;
              allocations: Obj;
            };
            const inventories: Record<
              string,
              { generation: number; inventories: Record<string, InventoryInput> }
            > = {};
            for (const [rp, entry] of Object.entries(o.inventories))
              inventories[normalizeUuid(rp)] = {
                generation: entry.resource_provider_generation,
                inventories: toInventories(entry.inventories),
              };
            const allocations = toConsumers(o.allocations, version);
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
