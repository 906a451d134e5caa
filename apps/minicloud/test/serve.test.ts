// `minicloud serve` as a real process (the built dist/cli.js): it listens on a free port, serves
// the API, the dashboard and the event stream, runs `demo --server` clients, and shuts down
// cleanly on SIGTERM (exit 0) even with streams open. Bad flags and unreachable servers fail
// with one line.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { APP } from '../src/steps/deploy.js';
import {
  cleanEnv,
  cli,
  killServes,
  startServe as startServeIn,
  uploadApp,
} from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-serve-'));
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});
const startServe = (name: string) => startServeIn(join(tmp, name), tmp);

function minicloud(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, ...args], { cwd: tmp, env: cleanEnv() }, (e, stdout, stderr) =>
      resolve({ code: e ? Number(e.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('minicloud serve (process)', () => {
  it('serves the API and the dashboard, runs a remote demo, and exits 0 on SIGTERM with a stream open', async () => {
    const s = await startServe('main');
    expect(s.stdout().trim().split('\n')).toHaveLength(1);
    const health = await fetch(`${s.url}/api/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true, database: 'sqlite' });
    const index = await fetch(`${s.url}/`);
    expect(index.status).toBe(200);
    expect(await index.text()).toMatch(/<div id="app"|<main|<script/);
    expect((await fetch(`${s.url}/placement/`)).status).toBe(200);

    const demo = await minicloud(['demo', '--server', s.url]);
    expect(demo.stderr).toBe('');
    expect(demo.code).toBe(0);
    const lines = demo.stdout.split('\n');
    expect(lines[0]).toBe('minicloud demo');
    expect(lines).toContain('summary');
    expect(demo.stdout).toMatch(/^ {2}reverted  env-2 after health-check failed/m);
    expect(demo.stdout).toMatch(/^ {2}recorded  run #1 in minicloud_runs/m);
    expect(demo.stdout).toMatch(/^done in \d+ ms$/m);

    // An open event stream must not hold the shutdown up.
    const events = await fetch(`${s.url}/api/events`);
    const reader = events.body!.getReader();
    await reader.read();
    s.child.kill('SIGTERM');
    const { code, signal } = await s.exited;
    expect(signal).toBeNull();
    expect(code).toBe(0);
    expect(s.stderr()).toBe('');
    // The stream was ended by the server, not cut.
    for (;;) {
      const r = await reader.read().catch(() => ({ done: true }));
      if (r.done) break;
    }
  }, 120_000);

  it('exits 0 on SIGINT too, and a second serve on the same database picks up its state', async () => {
    const s = await startServe('main');
    const envs = await (await fetch(`${s.url}/api/environments`)).json();
    expect(envs).toEqual({ environments: [] });
    const flows = (await (await fetch(`${s.url}/api/flows`)).json()) as {
      flows: { flowId: string }[];
    };
    expect(flows.flows.length).toBeGreaterThanOrEqual(2);
    // The dashboard's first snapshot shows the flows of the previous run, rebuilt from the log.
    const events = await fetch(`${s.url}/api/events`);
    const reader = events.body!.getReader();
    let text = '';
    while (!/event: snapshot\ndata: .*\n\n/.test(text)) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    }
    const snapshot = JSON.parse(/event: snapshot\ndata: (.*)\n/.exec(text)![1]!) as {
      state: { flows: { id: string; state: string; failure: { task: string } | null }[] };
    };
    const reverted = snapshot.state.flows.find((f) => f.id.startsWith('deploy-env-2-'));
    expect(reverted?.state).toBe('reverted');
    expect(reverted?.failure?.task).toBe('health-check');
    await reader.cancel();
    s.child.kill('SIGINT');
    expect((await s.exited).code).toBe(0);
  }, 120_000);

  it('exits 0 on SIGTERM in the middle of a deployment request', async () => {
    const s = await startServe('mid');
    expect(await uploadApp(s.url)).toBe(201);
    const deploying = fetch(`${s.url}/api/environments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'env-mid', package: APP, faults: { vmFailOnce: ['vm-2'] } }),
    }).then(
      (r) => r.status,
      (e: unknown) => String(e),
    );
    for (let i = 0; i < 400; i++) {
      const envs = (await (await fetch(`${s.url}/api/environments`)).json()) as {
        environments: unknown[];
      };
      if (envs.environments.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(s.stderr()).toBe('');
    // The request in flight either finished or was cut when the server went away.
    const outcome = await deploying;
    if (typeof outcome === 'number') expect([200, 201]).toContain(outcome);
    else expect(outcome).toMatch(/fetch failed|terminated|socket/i);
    const again = await startServe('mid');
    expect((await fetch(`${again.url}/api/health`)).status).toBe(200);
    again.child.kill('SIGTERM');
    expect((await again.exited).code).toBe(0);
  }, 120_000);

  it('on SIGTERM lets a running demo finish, then exits 0', async () => {
    const s = await startServe('demo-term');
    const client = spawn(process.execPath, [cli, 'demo', '--server', s.url], {
      cwd: tmp,
      env: cleanEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    client.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    client.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
    const clientExit = new Promise<number | null>((r) => client.on('exit', (code) => r(code)));
    for (let i = 0; i < 3000 && !out.includes('  deploy…'); i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(out).toContain('  deploy…');
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    expect(await clientExit).toBe(0);
    expect(err).toBe('');
    expect(out).toMatch(/^ {2}recorded {2}run #1 in minicloud_runs/m);
  }, 120_000);

  it('refuses bad flags and a port in use with one line', async () => {
    const bad = await minicloud(['serve', '--port', 'eighty']);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/--port must be a port number/);

    const s = await startServe('busy');
    const port = new URL(s.url).port;
    const busy = await minicloud([
      'serve',
      '--port',
      port,
      '--database',
      `sqlite:${join(tmp, 'busy2', 'mc.db')}`,
    ]);
    expect(busy.code).toBe(1);
    expect(busy.stderr.trim().split('\n')).toEqual([
      `minicloud: cannot listen on 127.0.0.1:${port}: the address is already in use [minicloud.listen_failed]`,
    ]);
    s.child.kill('SIGTERM');
    expect((await s.exited).code).toBe(0);
  }, 120_000);

  it('demo --server fails with one line when the server is unreachable, not minicloud, or the URL is bad', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createNetServer().listen(0, '127.0.0.1', () => {
        const p = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(p));
      });
    });
    const down = await minicloud(['demo', '--server', `http://127.0.0.1:${port}`]);
    expect(down.code).toBe(1);
    expect(down.stdout).toBe('');
    expect(down.stderr.trim().split('\n')).toHaveLength(1);
    expect(down.stderr).toMatch(
      new RegExp(
        `^minicloud: cannot reach minicloud serve at http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\); is it running\\? \\[minicloud\\.server_unreachable\\]$`,
        'm',
      ),
    );
    // Something else answering on that port.
    const other = createHttpServer((_req, res) => {
      res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>');
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    const wrong = await minicloud(['demo', '--server', otherUrl]);
    other.close();
    expect(wrong.code).toBe(1);
    expect(wrong.stderr.trim().split('\n')).toEqual([
      `minicloud: ${otherUrl} answered HTTP 404 (is this a minicloud serve?) [minicloud.server_error]`,
    ]);
    const notUrl = await minicloud(['demo', '--server', 'not a url']);
    expect(notUrl.code).toBe(1);
    expect(notUrl.stderr).toMatch(/--server must be a URL/);
  }, 60_000);
});
