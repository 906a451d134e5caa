// Graceful shutdown of a worker in the middle of a flow: SIGTERM → it stops claiming, lets the
// flow run for the grace period, then suspends it at a task boundary and hands the op back;
// another worker resumes the flow from the task log. Real processes on one SQLite file.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from '@rigging/core';
import { afterAll, describe, expect, it } from 'vitest';
import { openCloud, type Cloud } from '../src/cloud/index.js';
import { APP, appFiles } from '../src/steps/deploy.js';

const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'minicloud-handback-'));
const database = `sqlite:${join(dir, 'mc.db')}`;
const children: ChildProcess[] = [];

function startWorker(): Promise<{ child: ChildProcess; exited: Promise<number | null> }> {
  const child = spawn(
    process.execPath,
    [cli, 'worker', '--database', database, '--data-dir', dir, '--lease-ms', '2000'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(child);
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  return new Promise((ready, fail) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) ready({ child, exited });
    });
    void exited.then(() => fail(new Error('worker exited before it was ready')));
  });
}

afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('minicloud worker, SIGTERM mid-flow', () => {
  it(
    'hands the flow back at a task boundary; another worker resumes it',
    { timeout: 120_000 },
    async () => {
      await using cloud: Cloud = await openCloud({
        databaseUrl: database,
        dataDir: dir,
        worker: false,
        leaseMs: 2000,
      });
      await cloud.startupReshape();
      await cloud.uploadPackage(APP.fqn, APP.version, appFiles(1));
      const a = await startWorker();
      const deploying = cloud.deployEnvironment('env-h', {
        package: APP,
        faults: { stepMs: 1500 }, // 9 steps, one after the other: far longer than the 5 s grace
      });
      deploying.catch(() => {});
      let flowId: string | undefined;
      while (!flowId) {
        flowId = (await cloud.environments()).find((e) => e.name === 'env-h')?.flowId;
        await sleep(50);
      }
      // The second worker starts while the first one runs the flow (a node process can take
      // seconds to start on a loaded machine: the flow must still be far from done at SIGTERM).
      const starting = startWorker();
      while (!(await cloud.engine.history(flowId)).some((e) => e.state === 'SUCCESS'))
        await sleep(50);
      const b = await starting;
      const done = (await cloud.engine.history(flowId)).filter((e) => e.state === 'SUCCESS');
      // at least 4 steps (6 s) left: more than the 5 s grace
      expect(done.length, 'the flow has more left than the grace period').toBeLessThanOrEqual(5);
      a.child.kill('SIGTERM');
      expect(await a.exited).toBe(0);

      const result = await deploying;
      expect(result.ok).toBe(true);
      const history = await cloud.engine.history(flowId);
      const flowStates = history.filter((e) => e.task === null).map((e) => e.state);
      expect(flowStates).toEqual(['RUNNING', 'SUSPENDED', 'RUNNING', 'SUCCESS']);
      const successes = history.filter((e) => e.state === 'SUCCESS' && e.task);
      expect(successes).toHaveLength(9); // every task once: nothing done twice after the hand-back
      expect(new Set(successes.map((e) => e.task)).size).toBe(9);
      expect((await cloud.environments()).find((e) => e.name === 'env-h')?.state).toBe('deployed');
      b.child.kill('SIGTERM');
      expect(await b.exited).toBe(0);
    },
  );
});

describe('a producer-only cloud (serve beside workers)', () => {
  it('shows queue keys that other processes work on', { timeout: 60_000 }, async () => {
    await using cloud: Cloud = await openCloud({
      databaseUrl: database,
      dataDir: dir,
      worker: false,
      watchQueuesMs: 100,
    });
    const w = await startWorker();
    await cloud.castContainerOp('w-1', 'create', { durationMs: 10 });
    const start = await cloud.castContainerOp('w-1', 'start', {
      durationMs: 10,
      fail: 'bad entrypoint',
    });
    const cancelled = await cloud.castContainerOp('w-1', 'stop', { durationMs: 10 });
    let key = cloud.hub.state.queues.find((k) => k.key === 'w-1');
    while (key?.status !== 'blocked') {
      await sleep(50);
      key = cloud.hub.state.queues.find((k) => k.key === 'w-1');
    }
    expect((await cloud.queue.get(cancelled))?.status).toBe('cancelled');
    expect(key?.lastFailure).toMatchObject({ opId: start, type: 'start' });
    expect(key?.lastFailure?.message).toContain('bad entrypoint');
    await cloud.queue.discard('w-1');
    while (cloud.hub.state.queues.find((k) => k.key === 'w-1')?.status !== 'idle') await sleep(50);
    w.child.kill('SIGTERM');
    expect(await w.exited).toBe(0);
  });
});
