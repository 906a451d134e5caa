// Fuzzed requests against a real `minicloud serve`, over every operation of its OpenAPI document:
// path parameters, query strings, bodies and content types drawn from the documented schemas
// (mostly near-valid values, so they reach the handlers) mixed with junk, a few hundred cases
// sent over keep-alive connections a batch at a time. No answer may be a 5xx, a status the
// document does not list for the operation, a media type or body its documented schema for that
// status refuses, or a dropped connection; a request the document's own schemas refuse (path
// parameter, query, body or media type) is answered 4xx with the error body and changes nothing.
// A failure prints the request.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP } from '../src/steps/deploy.js';
import { killServes, startServe, uploadApp, type Served } from './dashboard-serve.js';

/** Requests to send over every operation. */
const CASES = 600;
/** Requests the document refuses to send (each must be refused and change nothing). */
const INVALID_CASES = 200;
/** Requests in flight at once (one fast-check run is a batch of them). */
const BATCH = 4;

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
  // Nothing runs any more once the setup's op is done: the state only changes through requests.
  for (let status = ''; !['succeeded', 'failed'].includes(status);) {
    status = ((await (await fetch(`${s.url}/api/ops/${opId}`)).json()) as { status: string })
      .status;
  }
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
  required?: boolean;
  schema: Schema;
}
/** A documented answer: its schema by media type (none: an empty body). */
type Documented = Record<string, { schema?: Schema }> | undefined;
interface Operation {
  method: string;
  path: string;
  parameters: Parameter[];
  /** The JSON body schema, when the operation takes JSON. */
  body?: Schema;
  /** The media types of its request body (none when it takes no body). */
  bodyTypes: string[];
  /** Its documented answers, by status. */
  responses: Record<string, Documented>;
}

async function operations(): Promise<Operation[]> {
  const doc = (await (await fetch(`${s.url}/api/openapi.json`)).json()) as {
    paths: Record<
      string,
      Record<
        string,
        {
          parameters?: Parameter[];
          responses: Record<string, { content?: Record<string, { schema?: Schema }> }>;
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
        path,
        parameters: op.parameters ?? [],
        ...(body ? { body } : {}),
        bodyTypes: Object.keys(op.requestBody?.content ?? {}),
        responses: Object.fromEntries(
          Object.entries(op.responses).map(([status, r]) => [status, r.content]),
        ),
      };
    }),
  );
}

// ------------------------------------------------------------------ the document's verdicts

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
const compiled = new Map<object, ValidateFunction>();
/** Why `value` does not match `schema`, or undefined when it does. */
function refusal(schema: object, value: unknown): string | undefined {
  let validate = compiled.get(schema);
  if (!validate) compiled.set(schema, (validate = ajv.compile(schema)));
  return validate(value) ? undefined : ajv.errorsText(validate.errors);
}

/**
 * Why the document refuses this request (a path parameter, a query parameter, the body or its
 * media type outside the documented schemas), or undefined when it does not.
 */
function documentRefuses(op: Operation, req: Drawn): string | undefined {
  for (const p of op.parameters) {
    const raw = p.in === 'path' ? req.pathParams[p.name] : req.query[p.name];
    if (raw === undefined) continue;
    let value: string;
    try {
      value = p.in === 'path' ? decodeURIComponent(raw) : raw;
    } catch {
      return `path parameter ${p.name}: bad percent-encoding`;
    }
    const why = refusal(p.schema, value);
    if (why) return `${p.in} parameter ${p.name}: ${why}`;
  }
  if (op.bodyTypes.length === 0) return undefined;
  const type = req.headers['content-type']?.split(';')[0]?.trim();
  if (req.body === undefined) return 'no body';
  if (!type || !op.bodyTypes.includes(type)) return `media type ${String(type)}`;
  if (!op.body) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(req.body).toString('utf8'));
  } catch {
    return 'body: not JSON';
  }
  const why = refusal(op.body, json);
  return why && `body: ${why}`;
}

/** Why this answer breaks the document, or undefined when it is one the document describes. */
function answerBreaks(op: Operation, answer: Answer): string | undefined {
  if (!(String(answer.status) in op.responses)) return 'a status the document does not list';
  const content = op.responses[String(answer.status)];
  if (content === undefined)
    return answer.body === '' ? undefined : 'a body where none is documented';
  const schema = content[answer.type]?.schema;
  if (!(answer.type in content))
    return `media type ${answer.type}, documented: ${Object.keys(content).join(', ')}`;
  if (answer.type !== 'application/json' || !schema) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(answer.body);
  } catch {
    return 'a body that is not JSON';
  }
  const why = refusal(schema, body);
  return why && `a body the documented schema refuses: ${why}`;
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
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
}

/** A drawn request of a documented operation, with the values it was drawn from. */
interface Drawn extends FuzzRequest {
  op: Operation;
  /** Path parameters as sent (percent-encoded, or raw). */
  pathParams: Record<string, string>;
  /** Documented query parameters as sent (before encoding). */
  query: Record<string, string>;
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

function requestFor(op: Operation): fc.Arbitrary<Drawn> {
  const pathParams = op.parameters.filter((p) => p.in === 'path');
  const queryParams = op.parameters.filter((p) => p.in === 'query');
  const path = fc.tuple(...pathParams.map(pathValue)).map((values) => ({
    url: pathParams.reduce((url, p, i) => url.replace(`{${p.name}}`, values[i]!), op.path),
    params: Object.fromEntries(pathParams.map((p, i) => [p.name, values[i]!])),
  }));
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
      return { text: all ? `?${all}` : '', params: params as Record<string, string> };
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
    op,
    pathParams: p.params,
    query: q.params,
    method: op.method,
    path: p.url + q.text,
    headers: b !== undefined && type ? { 'content-type': type } : ({} as Record<string, string>),
    ...(b !== undefined ? { body: b } : {}),
  }));
}

/** What the server answered (streams are cut once their headers are in). */
interface Answer {
  status: number;
  /** The media type, without parameters. */
  type: string;
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
        const type = (res.headers['content-type'] ?? '').split(';')[0]!.trim();
        if (/event-stream|ndjson/.test(type)) {
          res.destroy();
          resolve({ status: res.statusCode!, type, body: '' });
          return;
        }
        let body = '';
        res.setEncoding('utf8').on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, type, body }));
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
 * Sends `req`; throws with the request printed on a 5xx, an answer its operation does not
 * document (status, media type, body), a request the document refuses that was not refused
 * with a 4xx, or when no answer comes. Resolves with whether the document refuses `req`.
 */
async function check(req: Drawn): Promise<boolean> {
  const answer = await send(req).catch((error: unknown) => {
    throw new Error(`${describeRequest(req)}\n→ no answer: ${String(error)}`);
  });
  const answered = `${describeRequest(req)}\n→ ${answer.status} ${answer.type} ${answer.body.slice(0, 2000)}`;
  if (answer.status >= 500) throw new Error(answered);
  // A client resolves dot segments (`..`, `%2e%2e`) before sending: a path that left the
  // operation's prefix reached another route, whose answer this operation does not describe.
  const hole = req.op.path.indexOf('{');
  const prefix = hole < 0 ? req.op.path : req.op.path.slice(0, hole);
  if (!new URL(req.path, s.url).pathname.startsWith(prefix)) return false;
  const breaks = answerBreaks(req.op, answer);
  if (breaks) throw new Error(`${answered}\n(${breaks}, for ${req.operation})`);
  const refused = documentRefuses(req.op, req);
  if (refused && (answer.status < 400 || answer.status >= 500)) {
    throw new Error(`${answered}\n(accepted, but the document refuses it: ${refused})`);
  }
  return refused !== undefined;
}

/** What the API shows of the cloud's state (everything a request could change). */
async function state(): Promise<unknown> {
  const read = async (path: string) => {
    const res = await fetch(`${s.url}${path}`);
    return [res.status, await res.json()] as const;
  };
  const [flowId, opId] = known.id!;
  return Promise.all(
    [
      '/api/environments',
      '/api/containers',
      '/api/queues',
      '/api/queues/ctr-1',
      '/api/flows?limit=1000',
      `/api/packages/${APP.fqn}/${APP.version}`,
      `/api/ops/${opId}`,
      `/api/flows/${flowId}`,
    ].map(read),
  );
}

describe('fuzzed requests on every route of the OpenAPI document', () => {
  // First, while nothing else runs: every request here is refused by the document's schemas.
  it(`refuse what the document refuses, with a 4xx error body, changing nothing (${INVALID_CASES} requests)`, async () => {
    const withInput = (await operations()).filter(
      (op) => op.parameters.length > 0 || op.bodyTypes.length > 0,
    );
    const before = await state();
    const seen = new Set<string>();
    const refused = fc
      .constantFrom(...withInput)
      .chain((op) => requestFor(op).filter((r) => documentRefuses(op, r) !== undefined));
    await fc.assert(
      fc.asyncProperty(fc.array(refused, { minLength: BATCH, maxLength: BATCH }), async (batch) => {
        await Promise.all(batch.map(check));
        for (const r of batch) seen.add(r.operation);
      }),
      { numRuns: INVALID_CASES / BATCH },
    );
    // Every operation that takes input had some of it refused.
    expect([...seen].sort()).toEqual(withInput.map((op) => `${op.method} ${op.path}`).sort());
    expect(await state()).toEqual(before);
  }, 120_000);

  it(`answer what the document describes, never a 5xx (${CASES} requests, ${BATCH} at a time)`, async () => {
    const ops = await operations();
    expect(ops.length).toBeGreaterThan(20);
    const seen = new Set<string>();
    const started = Date.now();
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(...ops.map(requestFor)), { minLength: BATCH, maxLength: BATCH }),
        async (batch) => {
          for (const wasRefused of await Promise.all(batch.map(check))) refused += +wasRefused;
          for (const r of batch) seen.add(r.operation);
        },
      ),
      { numRuns: CASES / BATCH },
    );
    console.info(
      `fuzz: ${CASES} requests (${refused} refused by the document) over ${ops.length} operations in ${Date.now() - started} ms`,
    );
    // Both kinds were sent, and every operation was drawn.
    expect(refused).toBeGreaterThan(0);
    expect(refused).toBeLessThan(CASES);
    expect([...seen].sort()).toEqual(ops.map((op) => `${op.method} ${op.path}`).sort());
    // The server is still up and logged no internal error.
    const health = { operation: 'GET /api/health', method: 'GET' };
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
