// `GET /api/ops/:id?waitMs=` across processes, on PostgreSQL: the API host is a producer-only
// cloud (as `minicloud serve` beside workers), a `minicloud worker` process runs the ops. The
// API host looks for the ends of the ops it waits for every 100 ms, so the long poll answers
// within about that of the op's end (at the queue's default poll on PostgreSQL, 2 s, the lag
// would average about a second). Closing the server ends its pending long polls at once, each
// answered with its op as it is then.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, service, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCloud, type Cloud } from '../src/cloud/index.js';
import { loadConfig } from '../src/config.js';
import { createServer, type MinicloudServer } from '../src/http/server.js';

const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const status = await service('postgres');
/** Ops followed one after the other on one key. */
const OPS = 12;

describe.skipIf(!status.available)('GET /api/ops/:id?waitMs= beside a worker process', () => {
  const dir = mkdtempSync(join(tmpdir(), 'minicloud-long-poll-'));
  let fresh: FreshDatabase;
  let cloud: Cloud;
  let server: MinicloudServer;
  let worker: ChildProcess | undefined;

  const call = async (method: 'GET' | 'POST', url: string, payload?: object) => {
    const res = await server.app.inject({ method, url, ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.json(), text: res.body };
  };
  const cast = async (type: string, durationMs: number) => {
    const a = await call('POST', '/api/containers/lp-1/ops', { type, payload: { durationMs } });
    expect(a.status, a.text).toBe(202);
    return a.body.opId as string;
  };

  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'minicloud_long_poll');
    cloud = await openCloud({ databaseUrl: fresh.url, dataDir: dir, worker: false });
    server = await createServer({
      cloud,
      config: loadConfig({ database: fresh.url, dataDir: dir }, {}, dir),
    });
    await server.app.ready();
    const child = spawn(
      process.execPath,
      [cli, 'worker', '--database', fresh.url, '--data-dir', dir],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    worker = child;
    await new Promise<void>((ready, fail) => {
      child.stdout!.on('data', (d: Buffer) => {
        if (d.toString().includes('ready')) ready();
      });
      child.once('exit', () => fail(new Error('the worker exited before it was ready')));
    });
  }, 120_000);

  afterAll(async () => {
    worker?.kill('SIGKILL');
    await server?.close();
    await cloud?.close();
    await fresh?.drop();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it(
    'answers each op as it ends in the worker, well before the next poll',
    { timeout: 120_000 },
    async () => {
      const lags: number[] = [];
      for (let i = 0; i < OPS; i++) {
        const id = await cast(i === 0 ? 'create' : i % 2 ? 'start' : 'stop', 100);
        const a = await call('GET', `/api/ops/${id}?waitMs=30000`);
        const answered = Date.now();
        expect(a.status, a.text).toBe(200);
        expect(a.body).toMatchObject({ id, status: 'succeeded' });
        lags.push(answered - new Date(a.body.finishedAt).getTime());
      }
      // Polls 2 s apart (the queue's default on PostgreSQL) would make it about 1 s.
      const mean = lags.reduce((sum, lag) => sum + lag, 0) / lags.length;
      expect(mean, `lags ${lags.join(', ')} ms`).toBeLessThan(600);
    },
  );

  it(
    'ends pending long polls when the server closes, answering with the op as it is',
    { timeout: 60_000 },
    async () => {
      const id = await cast('start', 60_000);
      const url = await server.listen({ host: '127.0.0.1', port: 0 });
      const pending = fetch(`${url}/api/ops/${id}?waitMs=60000`).then(async (res) => ({
        status: res.status,
        body: (await res.json()) as { status: string },
      }));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const started = Date.now();
      await server.close();
      expect(Date.now() - started).toBeLessThan(3_000);
      const answer = await pending;
      expect(answer.status).toBe(200);
      expect(['queued', 'running']).toContain(answer.body.status);
    },
  );
});
