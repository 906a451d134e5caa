// The OpenAPI document tells the truth about every answer, in-process (Fastify inject): each
// operation is called until it has answered its documented 2xx, and every answer's status is
// documented, its body validates against the documented schema for that status, and — since the
// response schemas also serialize (a closed schema drops what it does not list) — the body the
// client gets is exactly what the route returned: no field the dashboard, the CLI or a user reads
// is lost to a schema that forgot it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FailureLimiter } from '../src/auth/limiter.js';
import { TokenStore } from '../src/auth/tokens.js';
import { openCloud, type Cloud } from '../src/cloud/index.js';
import { loadConfig } from '../src/config.js';
import { Auth } from '../src/http/auth.js';
import { createServer, type MinicloudServer } from '../src/http/server.js';
import { APP, appFiles } from '../src/steps/deploy.js';
import { tgz } from './archives.js';

const dir = mkdtempSync(join(tmpdir(), 'minicloud-openapi-responses-'));
const dbUrl = `sqlite:${join(dir, 'mc.db')}`;
let cloud: Cloud;
let server: MinicloudServer;
/** What each route handed to the serializer, by request id. */
const handed = new Map<string, unknown>();

interface Operation {
  operationId: string;
  security?: unknown[];
  parameters?: { in: string; name: string }[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<
    string,
    {
      content?: Record<string, { schema: object }>;
      links?: Record<string, { operationId: string; parameters: Record<string, string> }>;
    }
  >;
}
let doc: { paths: Record<string, Record<string, Operation>> };

beforeAll(async () => {
  cloud = await openCloud({ databaseUrl: dbUrl, dataDir: dir });
  await cloud.startupReshape();
  const config = loadConfig({ database: dbUrl, dataDir: dir }, {}, dir);
  server = await createServer({ cloud, config });
  // After the server's own hooks (the redactor): the payload exactly as it goes to the schema.
  server.app.addHook('preSerialization', async (request, _reply, payload) => {
    handed.set(request.id, payload);
    return payload;
  });
  await server.app.ready();
  doc = server.app.swagger() as unknown as typeof doc;
}, 120_000);

afterAll(async () => {
  await server?.close();
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
/** Links followed from an answer's body. */
const linked = new Set<string>();
/** `METHOD /path/{param}` of every checked answer, with its status. */
const answered = new Map<string, Set<number>>();

/**
 * Calls `method template` (path parameters filled from `params`) and checks the answer against
 * the document; resolves with the status and parsed body.
 */
async function call(
  method: 'GET' | 'POST' | 'DELETE',
  template: string,
  params: Record<string, string> = {},
  body?: { json: unknown } | { bytes: Buffer; type: string },
): Promise<{ status: number; body: any }> {
  const url = template.replace(/\{(\w+)\}/g, (_, p: string) => encodeURIComponent(params[p]!));
  const res = await server.app.inject({
    method,
    url,
    ...(body && 'json' in body ? { payload: body.json as object } : {}),
    ...(body && 'bytes' in body
      ? { payload: body.bytes, headers: { 'content-type': body.type } }
      : {}),
  });
  const where = `${method} ${template} → ${res.statusCode} ${res.body.slice(0, 500)}`;
  const op = doc.paths[template]?.[method.toLowerCase()];
  expect(op, `${method} ${template} is not in the document`).toBeDefined();
  const documented = op!.responses[String(res.statusCode)];
  expect(documented, `undocumented status: ${where}`).toBeDefined();
  const type = String(res.headers['content-type'] ?? '').split(';')[0]!;
  if (documented!.content === undefined) {
    expect(res.body, where).toBe('');
  } else {
    expect(Object.keys(documented!.content), where).toContain(type);
  }
  let parsed: unknown;
  if (type === 'application/json') {
    parsed = res.json();
    const validate = ajv.compile(documented!.content![type]!.schema);
    expect(validate(parsed), `${where}\n${ajv.errorsText(validate.errors)}`).toBe(true);
    // Nothing the route returned was dropped or changed by serialization.
    expect(handed.has(res.headers['x-request-id'] as string), where).toBe(true);
    const sent = handed.get(res.headers['x-request-id'] as string);
    expect(parsed, `${where}\n(the serializer changed the route's answer)`).toEqual(
      JSON.parse(JSON.stringify(sent)) as unknown,
    );
  }
  // Each link names an operation whose path parameters this answer's body fills.
  for (const [name, link] of Object.entries(documented!.links ?? {})) {
    const target = Object.values(doc.paths)
      .flatMap((ops) => Object.values(ops))
      .find((o) => o.operationId === link.operationId);
    expect(target, `${where}: link ${name} to no operation`).toBeDefined();
    const pathParams = (target!.parameters ?? []).filter((p) => p.in === 'path');
    expect(Object.keys(link.parameters).sort(), `${where}: link ${name}`).toEqual(
      pathParams.map((p) => p.name).sort(),
    );
    for (const expression of Object.values(link.parameters)) {
      const field = /^\$response\.body#\/(\w+)$/.exec(expression)?.[1];
      expect(typeof (parsed as Record<string, unknown>)[field!], `${where}: ${expression}`).toBe(
        'string',
      );
    }
    linked.add(name);
  }
  const key = `${method} ${template}`;
  answered.set(key, (answered.get(key) ?? new Set()).add(res.statusCode));
  return { status: res.statusCode, body: parsed };
}

async function settled(opId: string): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const status = (await cloud.queue.get(opId))?.status;
    if (status === 'succeeded' || status === 'failed' || status === 'cancelled') return status;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`op ${opId} did not finish`);
}

async function blocked(key: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if ((await cloud.queue.keyStatus(key)) === 'blocked') return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${key} never turned blocked`);
}

describe('every answer of the API matches the OpenAPI document and keeps every field', () => {
  it('create → read → delete over every operation, with its documented 2xx and errors', async () => {
    const pkg = { fqn: APP.fqn, version: APP.version };
    expect((await call('GET', '/api/health')).status).toBe(200);
    expect((await call('GET', '/api/session')).status).toBe(200);
    expect((await call('POST', '/api/session', {}, { json: { token: 'x' } })).status).toBe(200);
    expect((await call('DELETE', '/api/session')).status).toBe(204);
    expect((await call('GET', '/api/openapi.json')).status).toBe(200);
    expect((await call('GET', '/metrics')).status).toBe(200);
    expect((await call('GET', '/api/providers')).body.nodes.length).toBeGreaterThan(1);

    // Packages: JSON upload, archive upload, read back (and the errors on the way).
    expect((await call('GET', '/api/packages/{fqn}/{version}', pkg)).status).toBe(404);
    const files = appFiles(1).map((f) => ({
      path: f.path,
      ...(typeof f.content === 'string'
        ? { content: f.content }
        : { base64: Buffer.from(f.content).toString('base64') }),
    }));
    const up = await call('POST', '/api/packages', {}, { json: { ...pkg, files } });
    expect(up.status).toBe(201);
    const archive = tgz(appFiles(2).map((f) => ({ name: f.path, body: f.content })));
    const upArchive = await call('POST', '/api/packages/{fqn}/{version}/archive', pkg, {
      bytes: archive,
      type: 'application/gzip',
    });
    expect(upArchive.status).toBe(201);
    const wrongType = await call('POST', '/api/packages/{fqn}/{version}/archive', pkg, {
      json: { files: [] },
    });
    expect(wrongType.status).toBe(415);
    const current = await call('GET', '/api/packages/{fqn}/{version}', pkg);
    expect(current.body).toMatchObject({ ...pkg, id: upArchive.body.id });
    expect(current.body.integrity).toMatch(/^sha/);

    // Environments: deploy, a reverted deploy, read, list, delete.
    const deployed = await call(
      'POST',
      '/api/environments',
      {},
      {
        json: { name: 'env-a', package: pkg, faults: { vmFailOnce: ['vm-2'] } },
      },
    );
    expect(deployed.status).toBe(201);
    expect(deployed.body.retried).toEqual({ 'vm-2': 2 });
    expect(Object.keys(deployed.body.vms).length).toBeGreaterThan(0);
    const reverted = await call(
      'POST',
      '/api/environments',
      {},
      {
        json: { name: 'env-b', package: pkg, faults: { failStep: 'health-check' } },
      },
    );
    expect(reverted.status).toBe(200);
    expect(reverted.body.failure.task).toBe('health-check');
    expect(
      (await call('POST', '/api/environments', {}, { json: { name: 'env-a', package: pkg } }))
        .status,
    ).toBe(409);
    const env = await call('GET', '/api/environments/{name}', { name: 'env-a' });
    expect(env.body).toMatchObject({ name: 'env-a', flowId: deployed.body.flowId });
    expect((await call('GET', '/api/environments')).body.environments.length).toBeGreaterThan(0);
    const flow = await call('GET', '/api/flows/{id}', { id: reverted.body.flowId });
    expect(flow.body.history.some((e: { failure?: unknown }) => e.failure)).toBe(true);
    expect((await call('GET', '/api/flows/{id}', { id: deployed.body.flowId })).status).toBe(200);
    expect((await call('GET', '/api/flows/{id}', { id: 'nope' })).status).toBe(404);
    expect((await call('GET', '/api/flows')).body.flows.length).toBeGreaterThan(1);
    const deleted = await call('DELETE', '/api/environments/{name}', { name: 'env-a' });
    expect(deleted.status).toBe(200);
    expect(deleted.body.plan.objects.length).toBeGreaterThan(0);
    expect((await call('GET', '/api/environments/{name}', { name: 'env-a' })).status).toBe(404);
    expect((await call('DELETE', '/api/environments/{name}', { name: 'env-a' })).status).toBe(404);

    // Container ops and their queue: done, failed (the key blocks), resumed, discarded.
    const created = await call(
      'POST',
      '/api/containers/{name}/ops',
      { name: 'web-1' },
      {
        json: { type: 'create', payload: { image: 'nginx', durationMs: 1 } },
      },
    );
    expect(created.status).toBe(202);
    expect(await settled(created.body.opId)).toBe('succeeded');
    const op = await call('GET', '/api/ops/{id}', { id: created.body.opId });
    expect(op.body.result).toEqual({ name: 'web-1', state: 'created' });
    expect((await call('GET', '/api/containers')).body.containers.length).toBeGreaterThan(0);
    const failing = await call(
      'POST',
      '/api/containers/{name}/ops',
      { name: 'web-1' },
      {
        json: { type: 'start', payload: { fail: 'exit 1', durationMs: 1 } },
      },
    );
    expect(await settled(failing.body.opId)).toBe('failed');
    await blocked('web-1');
    const failed = await call('GET', '/api/ops/{id}', { id: failing.body.opId });
    expect(failed.body.error.message).toMatch(/exit 1/);
    const held = await call(
      'POST',
      '/api/containers/{name}/ops',
      { name: 'web-1' },
      {
        json: { type: 'stop' },
      },
    );
    const key = await call('GET', '/api/queues/{key}', { key: 'web-1' });
    expect(key.body).toMatchObject({ status: 'blocked', held: 1, blockedBy: failing.body.opId });
    expect((await call('GET', '/api/queues')).body.keys).toContainEqual({
      key: 'web-1',
      status: 'blocked',
    });
    const discarded = await call('POST', '/api/queues/{key}/discard', { key: 'web-1' });
    expect(discarded.body.cancelled).toEqual([held.body.opId]);
    expect((await call('POST', '/api/queues/{key}/resume', { key: 'web-1' })).status).toBe(409);
    const again = await call(
      'POST',
      '/api/containers/{name}/ops',
      { name: 'web-1' },
      {
        json: { type: 'start', payload: { fail: 'exit 2', durationMs: 1 } },
      },
    );
    expect(await settled(again.body.opId)).toBe('failed');
    await blocked('web-1');
    expect((await call('POST', '/api/queues/{key}/resume', { key: 'web-1' })).body).toEqual({
      ok: true,
      key: 'web-1',
      action: 'resume',
    });
    expect((await call('GET', '/api/ops/{id}', { id: 'nope' })).status).toBe(404);
    expect((await call('GET', '/api/queues/{key}', { key: 'nope' })).status).toBe(404);

    // Every operation answered one of its documented 2xx (the streams aside: their bodies never
    // end, the fuzz test checks their status and media type).
    const streams = ['GET /api/events', 'POST /api/demo'];
    const operations = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
    );
    const without2xx = operations.filter(
      (o) => !streams.includes(o) && ![...(answered.get(o) ?? [])].some((s) => s < 300),
    );
    expect(without2xx).toEqual([]);
    expect([...linked].sort()).toEqual([
      'deleteEnvironment',
      'getDeployFlow',
      'getEnvironment',
      'getOp',
      'getPackage',
      'getQueueKey',
    ]);
  });
});

describe('with tokens required, the document says which routes need one', () => {
  let guarded: MinicloudServer;
  beforeAll(async () => {
    const config = loadConfig({ database: dbUrl, dataDir: dir }, {}, dir);
    const auth = new Auth({
      tokens: new TokenStore(cloud.database),
      mode: 'required',
      limiter: new FailureLimiter({ maxFailures: 3 }),
    });
    guarded = await createServer({ cloud, config, auth });
    await guarded.app.ready();
  });
  afterAll(async () => {
    await guarded?.close();
  });

  /** Sends a request to the server that requires tokens; checks its status is documented. */
  async function send(method: string, path: string, url: string, headers = {}, payload?: object) {
    const res = await guarded.app.inject({
      method: method as 'GET',
      url,
      headers,
      ...(payload ? { payload } : {}),
    });
    const op = doc.paths[path]![method.toLowerCase()]!;
    expect(
      Object.keys(op.responses),
      `${method} ${path} → ${res.statusCode} ${res.body.slice(0, 300)} (undocumented status)`,
    ).toContain(String(res.statusCode));
    return res;
  }

  it('a route without security: [] answers 401 without a token; one with it never does', async () => {
    const global = (guarded.app.swagger() as { security?: unknown[] }).security;
    expect(global?.length).toBeGreaterThan(0);
    const publicRoutes: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const url = path.replace(/\{(\w+)\}/g, 'x');
        const body = method === 'get' ? undefined : {};
        const res = await send(method.toUpperCase(), path, url, {}, body);
        const where = `${method.toUpperCase()} ${path} → ${res.statusCode} ${res.body.slice(0, 300)}`;
        if (Array.isArray(op.security) && op.security.length === 0) {
          publicRoutes.push(`${method.toUpperCase()} ${path}`);
          // GET /api/session says who the caller is: without a token, that it needs one
          if (path !== '/api/session' || method !== 'get') {
            expect(res.statusCode, where).not.toBe(401);
          }
        } else {
          expect(op.security, where).toBeUndefined();
          expect(res.statusCode, where).toBe(401);
        }
      }
    }
    expect(publicRoutes.sort()).toEqual([
      'DELETE /api/session',
      'GET /api/health',
      'GET /api/session',
      'POST /api/session',
    ]);
  });

  it('the session routes answer their documented 401, then 429 past the failure limit', async () => {
    const statuses = { get: new Set<number>(), post: new Set<number>() };
    for (let i = 0; i < 5; i++) {
      const headers = { authorization: `Bearer wrong-${i}` };
      statuses.get.add((await send('GET', '/api/session', '/api/session', headers)).statusCode);
      const signIn = await send('POST', '/api/session', '/api/session', {}, { token: `bad-${i}` });
      statuses.post.add(signIn.statusCode);
    }
    expect([...statuses.get].sort()).toEqual([401, 429]);
    expect([...statuses.post].sort()).toEqual([401, 429]);
  });
});
