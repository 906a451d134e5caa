// `minicloud demo --workers 3 --chaos`: three real worker processes, one SIGKILLed in the middle
// of a flow; the summary must prove the takeover lost nothing and did nothing twice. On
// PostgreSQL (skipped with a message when it is down, failing under CI=true) and on one SQLite
// file shared by the processes.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const backends = await sqlBackends('minicloud_chaos', ['postgres']);

function expectTakeover(stdout: string): void {
  expect(stdout).toContain('  workers   3 started (pids ');
  expect(stdout).toMatch(
    /  chaos     worker \d+ killed mid-flow; env-3 finished by \d+; nothing lost, nothing done twice/,
  );
  expect(stdout).toMatch(
    /  chaos     worker \d+ SIGKILLed mid-flow; env-3 deployed by \d+ \(8\/8 resources\); 0 completed tasks re-run, in-flight re-run: vm-2/,
  );
  expect(stdout).toMatch(/12 container ops: 0 lost, 0 applied twice, \d+ taken over/);
  // The rest of the story still holds with the work on other processes.
  expect(stdout).toContain('  retried   env-1: vm-2 (succeeded on a later attempt)');
  expect(stdout).toContain(
    '  reverted  env-2 after health-check failed, in reverse order: configure-app, vm-3, vm-2, vm-1, volume-3, volume-2, volume-1, create-network',
  );
  expect(stdout).toContain('  queue     9 ops succeeded, 1 failed, 2 cancelled; blocked: ctr-2');
  expect(stdout).toContain('  workers   3 worker processes ran the flows and container ops');
  expect(stdout).toMatch(/  destroyed env-1: .*; 3 allocations released/);
}

describe.each(backends)('minicloud demo --workers 3 --chaos on $kind', (backend) => {
  it.skipIf(!backend.available)(
    'kills a worker mid-flow; the others take over; nothing lost or done twice',
    { timeout: 240_000 },
    async () => {
      const fresh = await backend.create();
      const dataDir = mkdtempSync(join(tmpdir(), 'minicloud-chaos-'));
      try {
        const args = [cli, 'demo', '--database', fresh.url, '--data-dir', dataDir];
        const { stdout } = await run(process.execPath, [...args, '--workers', '3', '--chaos']);
        expectTakeover(stdout);
      } finally {
        rmSync(dataDir, { recursive: true, force: true });
        await fresh.drop();
      }
    },
  );
});

describe('minicloud demo --workers 3 --chaos on one SQLite file', () => {
  it(
    'kills a worker mid-flow; the others take over; nothing lost or done twice',
    { timeout: 240_000 },
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'minicloud-chaos-sqlite-'));
      try {
        const { stdout } = await run(process.execPath, [
          cli,
          'demo',
          '--database',
          `sqlite:${join(dir, 'minicloud.db')}`,
          '--workers',
          '3',
          '--chaos',
        ]);
        expectTakeover(stdout);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it('rejects --chaos without enough workers, and workers on an in-memory database', async () => {
    const noWorkers = await run(process.execPath, [cli, 'demo', '--chaos']).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect(noWorkers).toMatchObject({ code: 2 });
    expect((noWorkers as { stderr: string }).stderr).toContain('--chaos needs --workers 2 or more');
    const memory = await run(process.execPath, [
      cli,
      'demo',
      '--database',
      'sqlite::memory:',
      '--workers',
      '2',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect(memory).toMatchObject({ code: 2 });
    const bad = await run(process.execPath, [cli, 'worker', '--lease-ms', 'soon']).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect((bad as { stderr: string }).stderr).toContain(
      "minicloud: --lease-ms must be an integer from 500 to 600000, got 'soon'; see minicloud --help",
    );
  });
});

describe('minicloud worker', () => {
  it(
    'announces itself, and on SIGTERM stops claiming and exits 0',
    { timeout: 60_000 },
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'minicloud-worker-'));
      try {
        const child = spawn(
          process.execPath,
          [cli, 'worker', '--database', `sqlite:${join(dir, 'm.db')}`],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let stdout = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        const exited = new Promise<number | null>((done) =>
          child.once('exit', (code) => done(code)),
        );
        while (!stdout.includes('ready')) await new Promise((r) => setTimeout(r, 50));
        expect(stdout).toMatch(/minicloud worker ready: pid \d+, database sqlite:/);
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
        expect(stdout).toContain('stopping (finishing or handing back work)');
        expect(stdout).toContain('stopped');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
