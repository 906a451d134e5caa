// Fuzzed requests against a real `minicloud serve`, over every operation of its OpenAPI document:
// path parameters, query strings, bodies and content types drawn from the documented schemas
// (mostly near-valid values, so they reach the handlers) mixed with junk, a few thousand cases
// sent over keep-alive connections a batch at a time, within a time budget. No answer may be a
// 5xx, a status the document does not list, or a dropped connection; a failure prints the request.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP } from '../src/steps/deploy.js';
import { killServes, startServe, uploadApp, type Served } from './dashboard-serve.js';

/** Requests to send at most. */
const CASES = 3000;
/** Requests in flight at once (one fast-check run is a batch of them). */
const BATCH = 4;
/** Time the fuzzing may take; a loaded machine sends fewer cases rather than taking longer. */
const BUDGET_MS = 35_000;
/** Fewest cases that must have been sent within the budget. */
const MIN_CASES = 300;

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-fuzz-'));
const agent = new Agent({ keepAlive: true, maxSockets: BATCH });
let s: Served;
/** Values that exist in the server, so that some requests reach real resources. */
const known: Record<string, string[]> = {};

beforeAll(async () => {
  mkdirSync(join(tmp, 'serve'));
  s = await startServe(join(tmp, 'serve'), tmp, [], { MINICLOUD_LOG_LEVEL: 'error' });
  expect(await uploadApp(s.url)).toBe(201);
  const deployed = await fetch(`${s.url}/api/environments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'env-1', package: APP }),
  });
  const { flowId } = (await deployed.json()) as { flowId: string };
  const op = await fetch(`${s.url}/api/containers/ctr-1/ops`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'create' }),
  });
  const { opId } = (await op.json()) as { opId: string };
  Object.assign(known, {
    name: ['env-1', 'ctr-1'],
    id: [flowId, opId],
    key: ['ctr-1'],
    fqn: [APP.fqn],
    version: [APP.version],
  });
}, 120_000);

afterAll(() => {
  agent.destroy();
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

// ------------------------------------------------------------------ the document

interface Schema {
  type?: string | string[];
  enum?: unknown[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  items?: Schema;
  maxItems?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  anyOf?: Schema[];
  oneOf?: Schema[];
}
interface Parameter {
  in: 'path' | 'query';
  name: string;
  schema: Schema;
}
interface Operation {
  method: string;
  /** The statuses the document lists for it. */
  statuses: string[];
  path: string;
  parameters: Parameter[];
  body?: Schema;
}

async function operations(): Promise<Operation[]> {
  const doc = (await (await fetch(`${s.url}/api/openapi.json`)).json()) as {
    paths: Record<
      string,
      Record<
        string,
        {
          parameters?: Parameter[];
          responses: Record<string, unknown>;
          requestBody?: { content?: Record<string, { schema: Schema }> };
        }
      >
    >;
  };
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops).map(([method, op]) => {
      const body = op.requestBody?.content?.['application/json']?.schema;
      return {
        method: method.toUpperCase(),
        statuses: Object.keys(op.responses),
        path,
        parameters: op.parameters ?? [],
        ...(body ? { body } : {}),
      };
    }),
  );
}

// ------------------------------------------------------------------ values from schemas

/** `pattern` without its lookaheads and lookbehinds (fast-check cannot generate those). */
function withoutLookarounds(pattern: string): string {
  let out = '';
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] === '\\') {
      out += pattern.slice(i, i + 2);
      i++;
    } else if (/^\(\?<?[=!]/.test(pattern.slice(i))) {
      for (let depth = 0; i < pattern.length; i++) {
        if (pattern[i] === '\\') i++;
        else if (pattern[i] === '(') depth++;
        else if (pattern[i] === ')' && --depth === 0) break;
      }
    } else out += pattern[i];
  }
  return out;
}

/** Strings a route may meet: odd characters, encodings, lengths. */
const junkString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', ' ', '.', '..', '%', '%zz', 'a/b', '\u0000', '😀', 'x'.repeat(300)),
);

function stringFrom(schema: Schema): fc.Arbitrary<string> {
  const { minLength = 0, maxLength = 64 } = schema;
  const sized = fc.string({ minLength, maxLength: Math.min(maxLength, 64) });
  if (!schema.pattern) return fc.oneof(sized, junkString);
  let matching: fc.Arbitrary<string>;
  try {
    matching = fc.stringMatching(new RegExp(schema.pattern));
  } catch {
    matching = fc.stringMatching(new RegExp(withoutLookarounds(schema.pattern)));
  }
  return fc.oneof({ arbitrary: matching, weight: 3 }, sized, junkString);
}

/**
 * A drawn value as a query string value: objects as JSON (fast-check draws objects without a
 * prototype too, which `String()` cannot convert).
 */
function queryText(value: unknown): string {
  return typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);
}

/** Mostly values of `schema` (or near misses: bounds, missing fields), sometimes any JSON. */
function valueFrom(schema: Schema, depth = 0): fc.Arbitrary<unknown> {
  const junk = fc.jsonValue({ maxDepth: 2 });
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) return fc.oneof(...alternatives.map((a) => valueFrom(a, depth)), junk);
  if (schema.enum) return fc.oneof({ arbitrary: fc.constantFrom(...schema.enum), weight: 3 }, junk);
  const type = [schema.type ?? 'any'].flat()[0];
  let valid: fc.Arbitrary<unknown>;
  switch (type) {
    case 'null':
      valid = fc.constant(null);
      break;
    case 'boolean':
      valid = fc.boolean();
      break;
    case 'string':
      valid = stringFrom(schema);
      break;
    case 'integer':
    case 'number':
      valid = fc.oneof(
        fc.integer({ min: (schema.minimum ?? -1e6) - 1, max: (schema.maximum ?? 1e6) + 1 }),
        fc.constantFrom(-1, 0, 0.5, 2 ** 53, Number.MAX_SAFE_INTEGER + 2),
      );
      break;
    case 'array':
      valid =
        depth > 3
          ? fc.constant([])
          : fc.array(valueFrom(schema.items ?? {}, depth + 1), {
              maxLength: Math.min(schema.maxItems ?? 4, 4) + 1,
            });
      break;
    case 'object': {
      if (depth > 3) {
        valid = fc.constant({});
        break;
      }
      const fields = Object.fromEntries(
        Object.entries(schema.properties ?? {}).map(([k, v]) => [k, valueFrom(v, depth + 1)]),
      );
      valid = fc
        .tuple(
          fc.oneof(
            { arbitrary: fc.record(fields, { requiredKeys: schema.required ?? [] }), weight: 3 },
            fc.record(fields, { requiredKeys: [] }),
          ),
          fc.option(fc.tuple(fc.string({ maxLength: 10 }), junk), { freq: 5 }),
        )
        .map(([object, extra]) => (extra ? { ...object, [extra[0]]: extra[1] } : object));
      break;
    }
    default:
      return junk;
  }
  return fc.oneof({ arbitrary: valid, weight: 5 }, junk);
}

// ------------------------------------------------------------------ requests

interface FuzzRequest {
  /** The operation, as in the document (`POST /api/environments/{name}`). */
  operation: string;
  /** The statuses the document lists for the operation. */
  statuses: string[];
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
}

const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'text/plain',
  'application/gzip',
  'application/x-tar',
  'application/zip',
  'application/octet-stream',
  'multipart/form-data; boundary=x',
];

/** A path parameter as sent: percent-encoded, or raw (bad escapes, dots). */
function pathValue(param: Parameter): fc.Arbitrary<string> {
  // Lone surrogates (which encodeURIComponent refuses) become U+FFFD, as a client would send them.
  const encode = (v: string) => encodeURIComponent(Buffer.from(v).toString());
  return fc.oneof(
    { arbitrary: stringFrom(param.schema).map(encode), weight: 4 },
    { arbitrary: fc.constantFrom(...(known[param.name] ?? ['x'])).map(encode), weight: 2 },
    fc.constantFrom('%zz', '%', '..', '.', '%2e%2e', 'a%00b', '%C0%AF'),
  );
}

function requestFor(op: Operation): fc.Arbitrary<FuzzRequest> {
  const pathParams = op.parameters.filter((p) => p.in === 'path');
  const queryParams = op.parameters.filter((p) => p.in === 'query');
  const path = fc
    .tuple(...pathParams.map(pathValue))
    .map((values) =>
      pathParams.reduce((url, p, i) => url.replace(`{${p.name}}`, values[i]!), op.path),
    );
  const query = fc
    .tuple(
      fc.record(
        Object.fromEntries(queryParams.map((p) => [p.name, valueFrom(p.schema).map(queryText)])),
        { requiredKeys: [] },
      ),
      fc.option(fc.constantFrom('junk=1', 'limit=%zz', 'state=', 'a[b]=c', '&&='), { freq: 4 }),
    )
    .map(([params, raw]) => {
      const q = new URLSearchParams(params as Record<string, string>).toString();
      const all = [q, raw].filter(Boolean).join('&');
      return all ? `?${all}` : '';
    });
  const json = op.body ? valueFrom(op.body).map((v) => JSON.stringify(v)) : fc.json();
  const body =
    op.method === 'GET'
      ? fc.constant(undefined)
      : fc.oneof(
          { arbitrary: json, weight: 6 },
          fc.constant(undefined),
          fc.string({ maxLength: 40 }),
          fc.uint8Array({ maxLength: 512 }),
        );
  const contentType = fc.oneof(
    { arbitrary: fc.constant('application/json'), weight: 6 },
    fc.constantFrom(...CONTENT_TYPES),
    fc.constant(undefined),
  );
  return fc.tuple(path, query, body, contentType).map(([p, q, b, type]) => ({
    operation: `${op.method} ${op.path}`,
    statuses: op.statuses,
    method: op.method,
    path: p + q,
    headers: b !== undefined && type ? { 'content-type': type } : ({} as Record<string, string>),
    ...(b !== undefined ? { body: b } : {}),
  }));
}

/** What the server answered (streams are cut once their headers are in). */
interface Answer {
  status: number;
  body: string;
}

function send(req: FuzzRequest): Promise<Answer> {
  const url = new URL(req.path, s.url);
  // Node's client frames a DELETE body only when told its length.
  const length =
    req.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(req.body)) };
  return new Promise((resolve, reject) => {
    const r = request(
      url,
      { method: req.method, headers: { ...req.headers, ...length }, agent },
      (res) => {
        const type = res.headers['content-type'] ?? '';
        if (/event-stream|ndjson/.test(type)) {
          res.destroy();
          resolve({ status: res.statusCode!, body: '' });
          return;
        }
        let body = '';
        res.setEncoding('utf8').on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
        res.on('error', reject);
      },
    );
    r.on('error', reject);
    r.end(req.body);
  });
}

function describeRequest(req: FuzzRequest): string {
  const body =
    req.body === undefined
      ? '(no body)'
      : typeof req.body === 'string'
        ? req.body
        : `bytes ${Buffer.from(req.body).toString('base64')}`;
  return `${req.method} ${req.path} ${JSON.stringify(req.headers)} ${body.slice(0, 2000)}`;
}

/**
 * Sends `req`; throws with the request printed on a 5xx, a status its operation does not
 * document, or when no answer comes.
 */
async function check(req: FuzzRequest): Promise<void> {
  const answer = await send(req).catch((error: unknown) => {
    throw new Error(`${describeRequest(req)}\n→ no answer: ${String(error)}`);
  });
  const answered = `${describeRequest(req)}\n→ ${answer.status} ${answer.body.slice(0, 2000)}`;
  if (answer.status >= 500) throw new Error(answered);
  if (!req.statuses.includes(String(answer.status))) {
    throw new Error(`${answered}\n(a status the document does not list for ${req.operation})`);
  }
}

describe('fuzzed requests on every route of the OpenAPI document', () => {
  it(`never answer 5xx (up to ${CASES} requests, ${BATCH} at a time, within ${BUDGET_MS / 1000} s)`, async () => {
    const ops = await operations();
    expect(ops.length).toBeGreaterThan(20);
    const seen = new Set<string>();
    const started = Date.now();
    let sent = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(...ops.map(requestFor)), { minLength: BATCH, maxLength: BATCH }),
        async (batch) => {
          await Promise.all(batch.map(check));
          sent += batch.length;
          for (const r of batch) seen.add(r.operation);
        },
      ),
      { numRuns: CASES / BATCH, interruptAfterTimeLimit: BUDGET_MS },
    );
    console.info(
      `fuzz: ${sent} requests over ${ops.length} operations in ${Date.now() - started} ms`,
    );
    expect(sent).toBeGreaterThanOrEqual(MIN_CASES);
    // Every operation was drawn.
    expect([...seen].sort()).toEqual(ops.map((op) => `${op.method} ${op.path}`).sort());
    // The server is still up and logged no internal error.
    const health = { operation: 'GET /api/health', statuses: ['200'], method: 'GET' };
    expect((await send({ ...health, path: '/api/health', headers: {} })).status).toBe(200);
    expect(s.stderr()).not.toMatch(/request failed/);
  }, 120_000);
});

/** Placement operations (method, path with `{uuid}` / `{rc}` / `{trait}` holes). */
const PLACEMENT_OPS: [string, string][] = [
  ['GET', '/placement/'],
  ['GET', '/placement/resource_providers'],
  ['POST', '/placement/resource_providers'],
  ['GET', '/placement/resource_providers/{uuid}'],
  ['PUT', '/placement/resource_providers/{uuid}'],
  ['DELETE', '/placement/resource_providers/{uuid}'],
  ['GET', '/placement/resource_providers/{uuid}/inventories'],
  ['PUT', '/placement/resource_providers/{uuid}/inventories'],
  ['PUT', '/placement/resource_providers/{uuid}/inventories/{rc}'],
  ['GET', '/placement/resource_providers/{uuid}/usages'],
  ['PUT', '/placement/resource_providers/{uuid}/traits'],
  ['GET', '/placement/resource_classes'],
  ['PUT', '/placement/resource_classes/{rc}'],
  ['GET', '/placement/traits'],
  ['PUT', '/placement/traits/{trait}'],
  ['GET', '/placement/allocation_candidates'],
  ['GET', '/placement/allocations/{uuid}'],
  ['PUT', '/placement/allocations/{uuid}'],
  ['POST', '/placement/allocations'],
  ['POST', '/placement/reshaper'],
  ['PATCH', '/placement/resource_providers'],
];

const placementRequest = fc
  .tuple(
    fc.constantFrom(...PLACEMENT_OPS),
    fc.oneof(fc.uuid(), fc.constantFrom('CUSTOM_X', 'VCPU', 'x', '%00', '..', '__proto__')),
    fc.oneof(
      fc.constant(''),
      fc.constantFrom(
        '?resources=VCPU:1',
        '?resources=__proto__:1',
        '?resources=VCPU:-1',
        '?required=CUSTOM_X',
        '?member_of=in:x',
        '?limit=0',
      ),
      fc.string({ maxLength: 20 }).map((q) => `?${encodeURIComponent(q)}=1`),
    ),
    fc.oneof(
      { arbitrary: fc.json({ maxDepth: 4 }), weight: 4 },
      fc.constant(undefined),
      fc.string({ maxLength: 40 }),
    ),
    fc.constantFrom('placement 1.0', 'placement 1.39', 'placement latest', 'junk', undefined),
  )
  .map(([[method, path], hole, query, body, version]) => ({
    operation: `${method} ${path}`,
    statuses: [] as string[],
    method,
    path: path.replace(/\{[a-z]+\}/g, encodeURIComponent(hole)) + query,
    headers: {
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(version ? { 'openstack-api-version': version } : {}),
    } as Record<string, string>,
    ...(method !== 'GET' && body !== undefined ? { body } : {}),
  }));

describe('fuzzed requests on the Placement API', () => {
  it('never answer 5xx nor drop the connection, and every error is JSON', async () => {
    const started = Date.now();
    let sent = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(placementRequest, { minLength: BATCH, maxLength: BATCH }),
        async (batch) => {
          await Promise.all(
            batch.map(async (req) => {
              const answer = await send(req).catch((error: unknown) => {
                throw new Error(`${describeRequest(req)}\n→ no answer: ${String(error)}`);
              });
              const answered = `${describeRequest(req)}\n→ ${answer.status} ${answer.body.slice(0, 500)}`;
              if (answer.status >= 500) throw new Error(answered);
              if (answer.status >= 400 && answer.body !== '') {
                expect(() => JSON.parse(answer.body) as unknown, answered).not.toThrow();
              }
            }),
          );
          sent += batch.length;
        },
      ),
      { numRuns: 1000 / BATCH, interruptAfterTimeLimit: 15_000 },
    );
    console.info(`fuzz: ${sent} Placement requests in ${Date.now() - started} ms`);
    expect(sent).toBeGreaterThanOrEqual(100);
  }, 60_000);
});
