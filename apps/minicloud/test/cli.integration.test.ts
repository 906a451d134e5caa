// The demo against PostgreSQL and MariaDB (skipped with a message when a server is down).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const backends = await sqlBackends('minicloud_cli', ['postgres', 'mysql']);

describe.each(backends)('minicloud demo on $kind', (backend) => {
  it.skipIf(!backend.available)(
    'migrates once and records each run',
    { timeout: 60_000 },
    async () => {
      const fresh = await backend.create();
      try {
        const first = await run(process.execPath, [cli, 'demo', '--database', fresh.url]);
        expect(first.stdout).toContain('minicloud schema v1 (applied: create minicloud_runs)');
        expect(first.stdout).toContain('run #1 in minicloud_runs (1 so far)');
        const second = await run(process.execPath, [cli, 'demo', '--database', fresh.url]);
        expect(second.stdout).toContain('already up to date');
        expect(second.stdout).toContain('run #2 in minicloud_runs (2 so far)');
      } finally {
        await fresh.drop();
      }
    },
  );
});
