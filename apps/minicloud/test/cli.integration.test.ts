// The demo against PostgreSQL and MariaDB (skipped with a message when a server is down).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const backends = await sqlBackends('minicloud_cli', ['postgres', 'mysql']);

describe.each(backends)('minicloud demo on $kind', (backend) => {
  it.skipIf(!backend.available)(
    'runs the whole story twice, ending with its summary',
    { timeout: 120_000 },
    async () => {
      const fresh = await backend.create();
      try {
        const dataDir = mkdtempSync(join(tmpdir(), 'minicloud-int-'));
        const args = [cli, 'demo', '--database', fresh.url, '--data-dir', dataDir];
        try {
          const first = await run(process.execPath, args);
          expect(first.stdout).toContain('minicloud schema v7 (applied: create minicloud_runs');
          expect(first.stdout).toContain('6 consumers moved, none lost');
          expect(first.stdout).toContain(
            '  reverted  env-2 after health-check failed, in reverse order: configure-app, vm-3, vm-2, vm-1, volume-3, volume-2, volume-1, create-network',
          );
          expect(first.stdout).toContain(
            '  cache     1 hits, 2 misses, 2 downloads, 2 uploads, 1 outdated copies cleaned',
          );
          expect(first.stdout).toContain(
            '  queue     9 ops succeeded, 1 failed, 2 cancelled; blocked: ctr-2',
          );
          expect(first.stdout).toContain('run #1 in minicloud_runs (1 so far)');
          const second = await run(process.execPath, args);
          expect(second.stdout).toContain('already up to date');
          expect(second.stdout).toContain('already reshaped');
          expect(second.stdout).toContain('run #2 in minicloud_runs (2 so far)');
        } finally {
          rmSync(dataDir, { recursive: true, force: true });
        }
      } finally {
        await fresh.drop();
      }
    },
  );
});
