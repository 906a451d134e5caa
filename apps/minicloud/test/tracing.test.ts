// OpenTelemetry traces of a real `minicloud serve`: with OTEL_EXPORTER_OTLP_ENDPOINT set, the
// flows it runs reach a tiny OTLP/HTTP receiver (here) as a flow span with task and revert
// children carrying otelListener's attributes, exported when the server shuts down; without it,
// no OpenTelemetry module is even loaded.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { APP } from '../src/steps/deploy.js';
import { killServes, startServe, uploadApp } from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-tracing-'));
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

/**
 * `NODE_OPTIONS` that make a process append every scoped package it imports (`@scope/name…`)
 * to `file`, one a line.
 */
function importProbe(file: string): string {
  const hooks = join(tmp, 'probe-hooks.mjs');
  writeFileSync(
    hooks,
    `import { appendFileSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@')) appendFileSync(${JSON.stringify(file)}, specifier + '\\n');
  return next(specifier, context);
}
`,
  );
  const probe = join(tmp, 'probe.mjs');
  writeFileSync(
    probe,
    `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`,
  );
  return `--import=${pathToFileURL(probe).href}`;
}

interface AnyValue {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: { key: string; value: AnyValue }[];
  status?: { code?: number; message?: string };
}
interface OtlpRequest {
  resourceSpans: {
    resource: { attributes: { key: string; value: AnyValue }[] };
    scopeSpans: { scope: { name: string }; spans: OtlpSpan[] }[];
  }[];
}

/** An OTLP/HTTP receiver: every request's path, content type and parsed JSON body. */
async function otlpReceiver() {
  const received: { path: string; type: string; body: OtlpRequest }[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        path: req.url ?? '',
        type: req.headers['content-type'] ?? '',
        body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpRequest,
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close: () => new Promise((r) => server.close(r)),
  };
}

const attr = (span: { attributes: { key: string; value: AnyValue }[] }, key: string) => {
  const v = span.attributes.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue === undefined ? v?.boolValue : Number(v.intValue));
};

async function deploy(url: string, body: object): Promise<{ ok: boolean; flowId: string }> {
  const res = await fetch(`${url}/api/environments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return (await res.json()) as { ok: boolean; flowId: string };
}

describe('OpenTelemetry traces (minicloud serve)', () => {
  it('exports a flow span with its task and revert spans over OTLP/HTTP, flushed on shutdown', async () => {
    const receiver = await otlpReceiver();
    const imports = join(tmp, 'imports-traced.txt');
    mkdirSync(join(tmp, 'traced'));
    const s = await startServe(join(tmp, 'traced'), tmp, [], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      // Nothing is exported before shutdown: what arrives was flushed by the close.
      OTEL_BSP_SCHEDULE_DELAY: '600000',
      NODE_OPTIONS: importProbe(imports),
    });
    expect(await uploadApp(s.url)).toBe(201);
    const ok = await deploy(s.url, { name: 'env-ok', package: APP });
    const bad = await deploy(s.url, {
      name: 'env-bad',
      package: APP,
      faults: { failStep: 'health-check' },
    });
    expect([ok.ok, bad.ok]).toEqual([true, false]);
    expect(receiver.received).toEqual([]);

    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(s.stderr()).toBe('');
    await receiver.close();
    expect(readFileSync(imports, 'utf8')).toMatch(/^@opentelemetry\/sdk-trace-base$/m);

    expect(receiver.received.length).toBeGreaterThan(0);
    for (const r of receiver.received) {
      expect(r.path).toBe('/v1/traces');
      expect(r.type).toMatch(/^application\/json/);
    }
    const resources = receiver.received.flatMap((r) => r.body.resourceSpans);
    expect(resources.map((r) => attr(r.resource, 'service.name'))).toContain('minicloud');
    const scopes = resources.flatMap((r) => r.scopeSpans);
    expect(new Set(scopes.map((sc) => sc.scope.name))).toEqual(new Set(['@rigging/tasks']));
    const spans = scopes.flatMap((sc) => sc.spans);

    const flowSpan = (flowId: string) => {
      const found = spans.filter((x) => attr(x, 'rigging.flow_id') === flowId && !x.parentSpanId);
      expect(found, `one flow span for ${flowId}`).toHaveLength(1);
      return found[0]!;
    };
    const children = (flow: OtlpSpan) =>
      spans.filter((x) => x.parentSpanId === flow.spanId && x.traceId === flow.traceId);

    // The deployment that succeeded: a flow span, OK, and one OK span per task.
    const deployed = flowSpan(ok.flowId);
    expect(deployed.name).toBe('flow deploy-environment');
    expect(attr(deployed, 'rigging.flow')).toBe('deploy-environment');
    expect(attr(deployed, 'rigging.flow_state')).toBe('SUCCESS');
    expect(deployed.status?.code).toBe(1);
    const tasks = children(deployed);
    expect(tasks.map((t) => t.name)).toEqual(
      expect.arrayContaining(['task create-network', 'task vm-1', 'task health-check']),
    );
    for (const t of tasks) {
      expect(t.name).toBe(`task ${String(attr(t, 'rigging.task'))}`);
      expect(attr(t, 'rigging.flow_id')).toBe(ok.flowId);
      expect(attr(t, 'rigging.attempt')).toBeGreaterThanOrEqual(1);
      expect(attr(t, 'rigging.task_state')).toBe('SUCCESS');
      expect(t.status?.code).toBe(1);
    }

    // The one rolled back: the failed health check, then a revert span per completed task.
    const reverted = flowSpan(bad.flowId);
    expect(attr(reverted, 'rigging.flow_state')).toBe('REVERTED');
    expect(reverted.status?.code).toBe(2);
    const steps = children(reverted);
    const failed = steps.find((t) => t.name === 'task health-check')!;
    expect(attr(failed, 'rigging.task_state')).toBe('FAILURE');
    expect(failed.status).toMatchObject({ code: 2, message: expect.stringMatching(/503/) });
    const reverts = steps.filter((t) => t.name.startsWith('revert '));
    expect(reverts.map((t) => t.name)).toEqual(
      expect.arrayContaining(['revert configure-app', 'revert vm-1', 'revert create-network']),
    );
    for (const t of reverts) expect(attr(t, 'rigging.task_state')).toBe('REVERTED');
  }, 120_000);

  it('loads no OpenTelemetry module without OTEL_EXPORTER_OTLP_ENDPOINT', async () => {
    const imports = join(tmp, 'imports-plain.txt');
    mkdirSync(join(tmp, 'plain'));
    const s = await startServe(join(tmp, 'plain'), tmp, [], {
      OTEL_EXPORTER_OTLP_ENDPOINT: '',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
      NODE_OPTIONS: importProbe(imports),
    });
    expect(await uploadApp(s.url)).toBe(201);
    expect((await deploy(s.url, { name: 'env-ok', package: APP })).ok).toBe(true);
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    const loaded = readFileSync(imports, 'utf8');
    expect(loaded).toMatch(/^@rigging\/tasks$/m);
    expect(loaded).not.toMatch(/@opentelemetry/);
  }, 120_000);
});
