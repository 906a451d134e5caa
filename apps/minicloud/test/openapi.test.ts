// The described API of a real `minicloud serve`: every route is in the OpenAPI document, and
// what each route answers (status and body) is what the document says; `/metrics` exposes what
// the libraries' events reported during a demo run.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanEnv, cli, killServes, startServe, type Served } from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-openapi-'));
let s: Served;
beforeAll(async () => {
  mkdirSync(join(tmp, 'serve'));
  s = await startServe(join(tmp, 'serve'), tmp);
  // Fill the cloud (environments, flows, queue keys, cache traffic) through the API.
  await new Promise<void>((resolve, reject) =>
    execFile(
      process.execPath,
      [cli, 'demo', '--server', s.url],
      { cwd: tmp, env: cleanEnv() },
      (e) => (e ? reject(e) : resolve()),
    ),
  );
}, 180_000);
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

interface Operation {
  responses: Record<string, { content?: Record<string, { schema: object }> }>;
}
type Doc = { openapi: string; paths: Record<string, Record<string, Operation>> };

describe('OpenAPI document', () => {
  it('describes every route, and every answer matches its documented status and schema', async () => {
    const doc = (await (await fetch(`${s.url}/api/openapi.json`)).json()) as Doc;
    expect(doc.openapi).toBe('3.1.0');
    const envs = (await (await fetch(`${s.url}/api/environments`)).json()) as {
      environments: { name: string }[];
    };
    const flows = (await (await fetch(`${s.url}/api/flows`)).json()) as {
      flows: { flowId: string }[];
    };
    const values: Record<string, string> = {
      name: envs.environments[0]?.name ?? 'env-1',
      id: flows.flows[0]!.flowId,
      fqn: 'io.murano.apps.Web',
      version: '1.0.0',
      key: 'nope',
    };
    // Routes the server has but the document leaves out on purpose.
    const undocumented = ['/placement', '/placement/*', '/*'];
    const ajv = new Ajv({ strict: false, allErrors: true });
    let checked = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const url = s.url + path.replace(/\{([a-z]+)\}/g, (_, p: string) => values[p]!);
        const upper = method.toUpperCase();
        // POST bodies are malformed JSON (refused, nothing changes); DELETE targets nothing.
        const init: RequestInit =
          upper === 'POST'
            ? { method: upper, headers: { 'content-type': 'application/json' }, body: '{' }
            : upper === 'DELETE'
              ? { method: upper }
              : {};
        const target =
          upper === 'DELETE' && path.includes('{name}') ? url.replace(values.name!, 'nope') : url;
        const ac = new AbortController();
        const res = await fetch(target, { ...init, signal: ac.signal });
        const documented = op.responses[String(res.status)];
        expect(documented, `${upper} ${path} answered ${res.status}`).toBeDefined();
        const type = (res.headers.get('content-type') ?? '').split(';')[0]!;
        const schema =
          documented!.content?.[type]?.schema ?? documented!.content?.['application/json']?.schema;
        if (type === 'application/json' && schema) {
          const body = (await res.json()) as unknown;
          const validate = ajv.compile(schema);
          expect(
            validate(body),
            `${upper} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}`,
          ).toBe(true);
          checked++;
        }
        ac.abort();
      }
    }
    expect(checked).toBeGreaterThan(15);
    expect(undocumented.some((p) => p in doc.paths)).toBe(false);
  }, 60_000);
});

describe('/metrics', () => {
  it('exposes HTTP latency, queue, flow, task, lock, cache and reshape metrics in Prometheus format', async () => {
    const res = await fetch(`${s.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    for (const line of [
      /^minicloud_http_request_duration_seconds_count\{method="GET",route="\/api\/environments",status="200"\} [1-9]/m,
      /^minicloud_flow_transitions_total\{flow="deploy-environment",state="REVERTED"\} [1-9]/m,
      /^minicloud_flow_transitions_total\{flow="deploy-environment",state="SUCCESS"\} [1-9]/m,
      /^minicloud_task_duration_seconds_count\{flow="deploy-environment",task="[a-z-]+",state="SUCCESS"\} [1-9]/m,
      /^minicloud_lock_wait_seconds_count\{mode="exclusive"\} [1-9]/m,
      /^minicloud_package_cache_requests_total\{result="miss"\} [1-9]/m,
      /^minicloud_package_cache_requests_total\{result="hit"\} [1-9]/m,
      /^minicloud_package_cache_downloaded_bytes_total [1-9]/m,
      /^minicloud_package_cache_bytes \d+/m,
      /^minicloud_reshape_duration_seconds_count 1$/m,
      /^minicloud_reshape_consumers_moved_total [1-9]/m,
      /^minicloud_queue_keys\{status="blocked"\} \d+/m,
      /^minicloud_queue_ops\{status="pending"\} \d+/m,
    ]) {
      expect(text).toMatch(line);
    }
  });
});
