// Automatic recovery: a worker is SIGKILLed in the middle of a flow; a new engine started with the
// flow's definition finishes it by itself (no resume call), without running completed steps again.
// Run: pnpm tsx examples/recovery.ts   (it starts the worker that crashes as a child process)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sqlLockProvider } from '@rigging/locks/sql';
import { openDatabase } from '@rigging/sql';
import { Engine, linearFlow, task } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';

const [mode, url] = process.argv.slice(2);
const crash = mode === 'crash';

const step = (name: string, last = false) =>
  task({
    name,
    execute: () => {
      console.log(`  ${name} (pid ${process.pid})`);
      if (crash && last) process.kill(process.pid, 'SIGKILL'); // the worker dies here
      return `${name} done`;
    },
  });
const backup = linearFlow(
  'backup',
  step('snapshot'),
  step('copy'),
  step('verify', true),
  step('prune'),
);

if (crash) {
  const database = await openDatabase(url!);
  const locks = sqlLockProvider(database, { ttlMs: 1000 });
  const engine = new Engine({ log: await sqlLog(database), locks });
  await engine.run(backup, { flowId: 'nightly-backup', inputs: {} }); // never returns
} else {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-recovery-example-'));
  const dbUrl = `sqlite:${join(dir, 'tasks.db')}`;
  try {
    console.log('worker 1 starts the flow and is killed during verify:');
    const child = spawnSync(
      process.execPath,
      [...process.execArgv, fileURLToPath(import.meta.url), 'crash', dbUrl],
      {
        stdio: 'inherit',
      },
    );
    console.log(`worker 1 ended by ${child.signal ?? String(child.status)}`);

    console.log('worker 2 starts with the flow definitions and recovers what it finds:');
    const database = await openDatabase(dbUrl);
    // A SQLite lease expires ttlMs after its holder stopped renewing it: until then the flow is
    // "busy" and later scans try again (on PostgreSQL the dead worker's session lock goes at once).
    const locks = sqlLockProvider(database, { ttlMs: 1000 });
    const engine = new Engine({ log: await sqlLog(database), locks });
    const recovery = engine.startRecovery({ flows: [backup], intervalMs: 250 });
    try {
      await new Promise<void>((resolve) => {
        recovery.on('recovery:finished', ({ flowId, outcome }) => {
          if (outcome === 'busy') return; // its owner's lease has not expired yet
          console.log(`recovery: ${flowId} ${outcome}`);
          resolve();
        });
      });
    } finally {
      await recovery.stop();
    }
    await locks.close();
    await database.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
