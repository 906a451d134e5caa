// The HTTP API of `minicloud serve` in-process (Fastify inject, and a real port for the event
// stream): every route, bad input answered 400 with a clear body, 404s and 409s, never a 500.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCloud, type Cloud } from '../src/cloud/index.js';
import { loadConfig } from '../src/config.js';
import { createServer, type MinicloudServer } from '../src/http/server.js';
import { dashboardDistDir } from '../src/http/dashboard-dir.js';
import type { DemoMessage } from '../src/http/demo.js';
import { APP, appFiles } from '../src/steps/deploy.js';

const dir = mkdtempSync(join(tmpdir(), 'minicloud-http-'));
const dbUrl = `sqlite:${join(dir, 'mc.db')}`;
let cloud: Cloud;
let server: MinicloudServer;

interface Answer {
  status: number;
  body: any;
  headers: Record<string, unknown>;
  text: string;
}

async function call(method: string, url: string, payload?: unknown): Promise<Answer> {
  const res = await server.app.inject({
    method: method as 'GET',
    url,
    ...(payload === undefined
      ? {}
      : typeof payload === 'string'
        ? { payload, headers: { 'content-type': 'application/json' } }
        : { payload: payload as object }),
  });
  let body: unknown;
  try {
    body = res.json();
  } catch {
    body = undefined;
  }
  return { status: res.statusCode, body, headers: res.headers, text: res.body };
}

/** A 400 with the documented error body whose message mentions `mention`. */
function expectBad(a: Answer, mention?: RegExp): void {
  expect(a.status, a.text).toBe(400);
  expect(a.body.error.code).toMatch(/^minicloud\./);
  expect(typeof a.body.error.message).toBe('string');
  if (mention) expect(a.body.error.message).toMatch(mention);
}

async function waitOp(id: string): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const a = await call('GET', `/api/ops/${id}`);
    if (['succeeded', 'failed', 'cancelled'].includes(a.body.status)) return a.body.status;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`op ${id} did not finish`);
}

async function waitStatus(key: string, status: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if ((await cloud.queue.keyStatus(key)) === status) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${key} never turned ${status}`);
}

beforeAll(async () => {
  cloud = await openCloud({ databaseUrl: dbUrl, dataDir: dir });
  await cloud.startupReshape();
  const config = loadConfig({ database: dbUrl, dataDir: dir }, {}, dir);
  server = await createServer({ cloud, config });
  await server.app.ready();
}, 120_000);

afterAll(async () => {
  await server?.close();
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('minicloud serve HTTP API', { timeout: 60_000 }, () => {
  it('GET /api/health', async () => {
    const a = await call('GET', '/api/health');
    expect(a.status).toBe(200);
    expect(a.body).toMatchObject({ ok: true, database: 'sqlite', node: 'node-1' });
  });

  it('GET /api/providers: the reshaped tree', async () => {
    const a = await call('GET', '/api/providers');
    expect(a.status).toBe(200);
    expect(a.body.nodes.map((n: { name: string }) => n.name)).toEqual([
      'node-1',
      'node-1_pgpu0',
      'node-1_pgpu1',
      'node-1_pgpu2',
      'node-1_pgpu3',
    ]);
  });

  it('packages: upload, look up, and refuse bad input', async () => {
    const files = appFiles(1).map((f) => ({
      path: f.path,
      ...(typeof f.content === 'string'
        ? { content: f.content }
        : { base64: Buffer.from(f.content).toString('base64') }),
    }));
    const up = await call('POST', '/api/packages', { ...APP, files });
    expect(up.status, up.text).toBe(201);
    expect(up.body).toMatchObject({ fqn: APP.fqn, version: APP.version });
    expect(up.body.id).toMatch(/^upload-/);
    const got = await call('GET', `/api/packages/${APP.fqn}/${APP.version}`);
    expect(got.status).toBe(200);
    expect(got.body.id).toBe(up.body.id);
    expect((await call('GET', `/api/packages/${APP.fqn}/9.9.9`)).body.error.code).toBe(
      'minicloud.package_not_found',
    );
    expect((await call('GET', `/api/packages/${APP.fqn}/9.9.9`)).status).toBe(404);
    expectBad(await call('GET', '/api/packages/a%20b/1.0'), /fqn/);
    expectBad(await call('GET', '/api/packages/a/%E0%A4%A'));

    const file = { path: 'manifest.yaml', content: 'x' };
    expectBad(await call('POST', '/api/packages', { ...APP, fqn: '../etc', files: [file] }), /fqn/);
    expectBad(await call('POST', '/api/packages', { ...APP, files: [] }), /files/);
    expectBad(await call('POST', '/api/packages', { ...APP }), /files/);
    expectBad(
      await call('POST', '/api/packages', { ...APP, files: [{ path: '../x', content: 'x' }] }),
      /path/,
    );
    expectBad(
      await call('POST', '/api/packages', { ...APP, files: [{ path: 'a/./b', content: 'x' }] }),
      /path/,
    );
    expectBad(
      await call('POST', '/api/packages', { ...APP, files: [{ path: '/abs', content: 'x' }] }),
      /path/,
    );
    expectBad(
      await call('POST', '/api/packages', {
        ...APP,
        files: [{ path: 'a', content: 'x', base64: 'eA==' }],
      }),
    );
    expectBad(await call('POST', '/api/packages', { ...APP, files: [file, file] }), /duplicate/);
  });

  it('environments: deploy (sync), a rollback, list, get, delete, and their errors', async () => {
    const pkg = { fqn: APP.fqn, version: APP.version };
    // Bad input before anything happens.
    expectBad(await call('POST', '/api/environments', { name: 'Bad Name', package: pkg }), /name/);
    expectBad(await call('POST', '/api/environments', { name: 'env-a' }), /package/);
    expectBad(
      await call('POST', '/api/environments', { name: 'env-a', package: pkg, extra: 1 }),
      /additional/,
    );
    expectBad(
      await call('POST', '/api/environments', {
        name: 'env-a',
        package: pkg,
        faults: { failStep: 'rm -rf' },
      }),
    );
    expectBad(
      await call('POST', '/api/environments', { name: 42, package: pkg }),
      /name must be string/,
    );
    expectBad(await call('POST', '/api/environments', '{"name": "env-a",'), /JSON/);
    expectBad(await call('POST', '/api/environments', ''));
    const wrongType = await server.app.inject({
      method: 'POST',
      url: '/api/environments',
      payload: 'name=env-a',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(wrongType.statusCode).toBe(415);
    expect(wrongType.json().error.code).toBe('minicloud.unsupported_media_type');

    const missing = await call('POST', '/api/environments', {
      name: 'env-a',
      package: { fqn: 'io.nowhere.App', version: '1.0.0' },
    });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('minicloud.package_not_found');

    const ok = await call('POST', '/api/environments', {
      name: 'env-a',
      package: pkg,
      faults: { vmFailOnce: ['vm-2'] },
    });
    expect(ok.status, ok.text).toBe(201);
    expect(ok.body).toMatchObject({ env: 'env-a', ok: true, retried: { 'vm-2': 2 } });
    expect(ok.body.package.path).toBeUndefined();
    expect(ok.body.flowId).toMatch(/^deploy-env-a-/);

    const again = await call('POST', '/api/environments', { name: 'env-a', package: pkg });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('minicloud.env_exists');

    const failed = await call('POST', '/api/environments', {
      name: 'env-b',
      package: pkg,
      faults: { failStep: 'health-check' },
    });
    expect(failed.status).toBe(200);
    expect(failed.body.ok).toBe(false);
    expect(failed.body.failure.task).toBe('health-check');
    expect(failed.body.reverted.at(-1)).toBe('create-network');

    const list = await call('GET', '/api/environments');
    expect(list.body.environments.map((e: { name: string }) => e.name)).toEqual(['env-a']);
    expect((await call('GET', '/api/environments/env-a')).body).toMatchObject({
      name: 'env-a',
      state: 'deployed',
    });
    expect((await call('GET', '/api/environments/env-b')).status).toBe(404);
    expectBad(await call('GET', '/api/environments/NOT_VALID'), /name/);

    const del = await call('DELETE', '/api/environments/env-a');
    expect(del.status, del.text).toBe(200);
    const order: string[] = del.body.destroyed;
    expect(order.indexOf('env-a/net')).toBeGreaterThan(order.indexOf('env-a/vm-3'));
    expect(del.body.plan.groups.length).toBeGreaterThan(1);
    const gone = await call('DELETE', '/api/environments/env-a');
    expect(gone.status).toBe(404);
    expect(gone.body.error.code).toBe('minicloud.env_not_found');
    expectBad(await call('DELETE', '/api/environments/a%2Fb'));
  });

  it('containers and ops: cast (202), follow, list; bad input is 400', async () => {
    const cast = await call('POST', '/api/containers/web-1/ops', {
      type: 'create',
      payload: { image: 'nginx:1.27', durationMs: 5 },
    });
    expect(cast.status, cast.text).toBe(202);
    expect(cast.body).toMatchObject({ key: 'web-1', type: 'create' });
    expect(await waitOp(cast.body.opId)).toBe('succeeded');
    const list = await call('GET', '/api/containers');
    expect(list.body.containers).toContainEqual({
      name: 'web-1',
      image: 'nginx:1.27',
      state: 'created',
      status: 'idle',
    });
    expect((await call('GET', '/api/ops/nope')).status).toBe(404);
    expectBad(await call('POST', '/api/containers/web-1/ops', { type: 'explode' }), /type/);
    expectBad(await call('POST', '/api/containers/web-1/ops', {}), /type/);
    expectBad(await call('POST', '/api/containers/-bad/ops', { type: 'start' }), /name/);
    expectBad(
      await call('POST', '/api/containers/web-1/ops', {
        type: 'start',
        payload: { durationMs: '5' },
      }),
      /durationMs/,
    );
    expectBad(
      await call('POST', '/api/containers/web-1/ops', {
        type: 'start',
        payload: { durationMs: 10_000_000 },
      }),
      /durationMs/,
    );
    expectBad(
      await call('POST', '/api/containers/web-1/ops', { type: 'start', payload: { sudo: true } }),
    );
  });

  it('ops: GET with waitMs answers once the op has ended, or as it is when the wait runs out', async () => {
    const cast = (durationMs: number, type = 'start') =>
      call('POST', '/api/containers/web-lp/ops', { type, payload: { durationMs } });
    expect(await waitOp((await cast(5, 'create')).body.opId)).toBe('succeeded');
    const slow = (await cast(400)).body.opId as string;
    let started = Date.now();
    const ended = await call('GET', `/api/ops/${slow}?waitMs=30000`);
    expect(ended.status, ended.text).toBe(200);
    expect(ended.body).toMatchObject({ id: slow, status: 'succeeded' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect(Date.now() - started).toBeLessThan(15_000);
    // Ended already: at once. Unknown: 404 at once.
    started = Date.now();
    expect((await call('GET', `/api/ops/${slow}?waitMs=30000`)).body.status).toBe('succeeded');
    expect((await call('GET', '/api/ops/nope?waitMs=30000')).status).toBe(404);
    expect(Date.now() - started).toBeLessThan(5_000);
    // The wait runs out first: the op as it is then.
    const long = (await cast(3_000, 'stop')).body.opId as string;
    started = Date.now();
    const pending = await call('GET', `/api/ops/${long}?waitMs=300`);
    expect(pending.status, pending.text).toBe(200);
    expect(['queued', 'running']).toContain(pending.body.status);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    // Out of bounds, not a number, or an unknown parameter: 400, and the op is as it was.
    for (const query of [
      'waitMs=-1',
      'waitMs=60001',
      'waitMs=1e3',
      'waitMs=',
      'waitMs=abc',
      'wait=5',
    ]) {
      expectBad(await call('GET', `/api/ops/${long}?${query}`), /waitMs|wait|querystring/);
    }
    expect(await waitOp(long)).toBe('succeeded');
  });

  it('queues: a key turns blocked, resume drains it, discard empties one; 404 and 409', async () => {
    await waitOp(
      (
        await call('POST', '/api/containers/web-2/ops', {
          type: 'create',
          payload: { durationMs: 5 },
        })
      ).body.opId,
    );
    const failing = await call('POST', '/api/containers/web-2/ops', {
      type: 'start',
      payload: { fail: 'exit 1', durationMs: 5 },
    });
    expect(await waitOp(failing.body.opId)).toBe('failed');
    await waitStatus('web-2', 'blocked');
    // Cast after the failure: held behind the blocked key.
    const held = await call('POST', '/api/containers/web-2/ops', {
      type: 'stop',
      payload: { durationMs: 5 },
    });
    expect((await call('GET', '/api/queues')).body.keys).toContainEqual({
      key: 'web-2',
      status: 'blocked',
    });
    const info = await call('GET', '/api/queues/web-2');
    expect(info.body.status).toBe('blocked');
    expect(info.body.pending.map((o: { id: string }) => o.id)).toEqual([held.body.opId]);

    const resumed = await call('POST', '/api/queues/web-2/resume');
    expect(resumed.status, resumed.text).toBe(200);
    expect(resumed.body).toMatchObject({ ok: true, key: 'web-2' });
    expect(await waitOp(held.body.opId)).toBe('succeeded');
    await waitStatus('web-2', 'idle');
    const notBlocked = await call('POST', '/api/queues/web-2/resume');
    expect(notBlocked.status).toBe(409);
    expect(notBlocked.body.error).toMatchObject({
      code: 'queue.not-blocked',
      message: 'web-2 is idle, not blocked',
    });
    expect((await call('POST', '/api/queues/web-2/discard')).status).toBe(409);
    expect((await call('GET', '/api/queues/web-2')).status).toBe(200);

    // Blocked again, then discarded: the held op is cancelled.
    const f2 = await call('POST', '/api/containers/web-2/ops', {
      type: 'start',
      payload: { fail: 'exit 2', durationMs: 5 },
    });
    expect(await waitOp(f2.body.opId)).toBe('failed');
    await waitStatus('web-2', 'blocked');
    const held2 = await call('POST', '/api/containers/web-2/ops', { type: 'delete' });
    const discarded = await call('POST', '/api/queues/web-2/discard');
    expect(discarded.status).toBe(200);
    expect(discarded.body).toMatchObject({ ok: true, key: 'web-2', cancelled: [held2.body.opId] });
    expect(await waitOp(held2.body.opId)).toBe('cancelled');

    for (const path of ['/api/queues/nope/resume', '/api/queues/nope/discard']) {
      const a = await call('POST', path);
      expect(a.status).toBe(404);
      expect(a.body.error.code).toBe('queue.unknown-key');
    }
    expect((await call('GET', '/api/queues/nope')).status).toBe(404);
    expectBad(await call('POST', `/api/queues/${'k'.repeat(300)}/resume`), /key/);
  });

  it('flows: list and history; 404 and 400', async () => {
    const list = await call('GET', '/api/flows?limit=10');
    expect(list.status).toBe(200);
    const flows: { flowId: string; name: string; state: string }[] = list.body.flows;
    const deployed = flows.find((f) => f.flowId.startsWith('deploy-env-a-'));
    expect(deployed?.state).toBe('SUCCESS');
    const reverted = flows.find((f) => f.flowId.startsWith('deploy-env-b-'));
    expect(reverted?.state).toBe('REVERTED');
    const one = await call('GET', `/api/flows/${reverted!.flowId}`);
    expect(one.status).toBe(200);
    const states = one.body.history.map(
      (e: { task: string; state: string }) => `${e.task}:${e.state}`,
    );
    expect(states).toContain('health-check:FAILURE');
    expect(states).toContain('create-network:REVERTED');
    expect(
      (await call('GET', '/api/flows?state=REVERTED')).body.flows.map(
        (f: { flowId: string }) => f.flowId,
      ),
    ).toContain(reverted!.flowId);
    expect((await call('GET', '/api/flows/nope')).status).toBe(404);
    expectBad(await call('GET', '/api/flows?limit=abc'), /limit/);
    expectBad(await call('GET', '/api/flows?limit=0'), /limit/);
    expectBad(await call('GET', '/api/flows?state=EXPLODED'), /state/);
    expectBad(await call('GET', '/api/flows?sort=name'));
  });

  it('Placement API under /placement, bodies read by its own handler', async () => {
    const root = await call('GET', '/placement/');
    expect(root.status).toBe(200);
    expect(root.body.versions[0].max_version).toMatch(/^1\.\d+$/);
    const rps = await call('GET', '/placement/resource_providers');
    expect(rps.status).toBe(200);
    expect(rps.body.resource_providers.map((p: { name: string }) => p.name)).toContain('node-1');
    const created = await server.app.inject({
      method: 'POST',
      url: '/placement/resource_providers',
      payload: JSON.stringify({ name: 'http-test-rp' }),
      headers: { 'content-type': 'application/json', 'openstack-api-version': 'placement 1.20' },
    });
    expect(created.statusCode, created.body).toBe(200);
    expect(created.json().name).toBe('http-test-rp');
    const bad = await server.app.inject({
      method: 'POST',
      url: '/placement/resource_providers',
      payload: '{nope',
      headers: { 'content-type': 'application/json' },
    });
    expect(bad.statusCode).toBe(400);
  });

  it('POST /api/demo streams the story as NDJSON; a second one at once is 409', async () => {
    const first = server.app.inject({ method: 'POST', url: '/api/demo' });
    // The route starts the story synchronously; wait until the server says it runs.
    for (let i = 0; i < 200 && !(await call('GET', '/api/health')).body.demoRunning; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const second = await call('POST', '/api/demo');
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe('minicloud.demo_running');
    const res = await first;
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/x-ndjson/);
    const messages = res.body
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as DemoMessage);
    const lines = messages.flatMap((m) => (m.type === 'line' ? [m.text] : []));
    expect(lines[0]).toBe('minicloud demo');
    expect(lines).toContain('summary');
    expect(lines.some((l) => /^ {2}queue {5}.*blocked: ctr-2/.test(l))).toBe(true);
    expect(messages.at(-1)).toMatchObject({ type: 'end', ok: true });
  }, 120_000);

  it('the dashboard: built files at /, the event stream at /api/events, lock holders', async () => {
    const index = await call('GET', '/');
    if (dashboardDistDir().built) {
      expect(index.status).toBe(200);
      expect(index.headers['content-type']).toMatch(/^text\/html/);
    } else {
      expect(index.status).toBe(503);
      expect(index.text).toMatch(/not built/);
    }
    expect((await call('GET', '/assets/nope.js')).status).toBe(404);
    const unbuilt = await createServer({
      cloud,
      config: loadConfig({ database: dbUrl, dataDir: dir }, {}, dir),
      dashboardDir: join(dir, 'no-dashboard'),
    });
    const page = await unbuilt.app.inject({ method: 'GET', url: '/' });
    expect(page.statusCode).toBe(503);
    expect(page.body).toMatch(/the dashboard is not built .* run pnpm --filter minicloud build/);
    await unbuilt.close();
    const api404 = await call('GET', '/api/nope');
    expect(api404.status).toBe(404);
    expect(api404.body.error.code).toBe('minicloud.not_found');

    // The event stream needs a real socket.
    const url = await server.listen({ host: '127.0.0.1', port: 0 });
    const controller = new AbortController();
    const res = await fetch(`${url}/api/events`, { signal: controller.signal });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const readUntil = async (pattern: RegExp) => {
      while (!pattern.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended before ${String(pattern)}`);
        text += decoder.decode(value, { stream: true });
      }
    };
    await readUntil(/event: snapshot\ndata: .*\n\n/);
    const snapshot = JSON.parse(/event: snapshot\ndata: (.*)\n/.exec(text)![1]!);
    expect(snapshot.state.providers.nodes).toHaveLength(5);
    expect(snapshot.state.queues.some((k: { key: string }) => k.key === 'web-2')).toBe(true);
    // An event published by the cloud reaches the stream.
    await call('POST', '/api/containers/web-3/ops', { type: 'create', payload: { durationMs: 5 } });
    await readUntil(/event: queue:key\ndata: .*"web-3"/);
    // A deployment holds its package: its usage lock shows up as a holder.
    await call('POST', '/api/environments', { name: 'env-c', package: APP });
    await readUntil(/event: cache:update\ndata: .*"locks":\[\{"key":"usage:/);
    controller.abort();
    expect(await call('DELETE', '/api/environments/env-c')).toMatchObject({ status: 200 });
  });

  it('finds the built dashboard from the sources and from the bundle, or where told', () => {
    const fromSource = dashboardDistDir({}, new URL('../src/http/x.js', import.meta.url).href);
    const fromBundle = dashboardDistDir({}, new URL('../dist/cli.js', import.meta.url).href);
    expect(fromSource.dir).toBe(fromBundle.dir);
    expect(fromSource.dir).toMatch(/apps\/minicloud\/dashboard\/dist\/$/);
    expect(dashboardDistDir({ MINICLOUD_DASHBOARD_DIR: join(dir, 'x') })).toEqual({
      dir: join(dir, 'x'),
      built: false,
    });
  });

  it('describes every route it serves in its OpenAPI document (hidden: Placement, files)', async () => {
    const doc = (await call('GET', '/api/openapi.json')).body as {
      paths: Record<string, Record<string, unknown>>;
    };
    const documented = new Set(
      Object.entries(doc.paths).flatMap(([path, ops]) =>
        Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ':$1')}`),
      ),
    );
    const served = server.routes.filter((r) => !r.hidden).map((r) => r.route);
    expect(served.length).toBeGreaterThan(20);
    expect(new Set(served)).toEqual(documented);
    expect(server.routes.filter((r) => r.hidden).map((r) => r.route)).toEqual(
      expect.arrayContaining(['GET /placement', 'GET /*']),
    );
  });

  it('never answers 500 to malformed bodies (property)', async () => {
    const routes = [
      '/api/environments',
      '/api/packages',
      '/api/containers/web-9/ops',
      '/api/queues/web-9/resume',
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), fc.jsonValue(), async (route, value) => {
        const a = await call('POST', route, JSON.stringify(value));
        expect(a.status, `${route} ${JSON.stringify(value)} → ${a.text}`).toBeLessThan(500);
        if (a.status >= 400) expect(typeof a.body.error.message).toBe('string');
      }),
      { numRuns: 60 },
    );
  });
});
