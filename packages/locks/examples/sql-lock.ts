// A distributed lock over SQLite (works across processes on one machine); swap the URL for
// postgres://… or mysql://… to lock across machines.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RiggingError } from '@rigging/core';
import { openDatabase } from '@rigging/sql';
import { sqlLockProvider } from '@rigging/locks/sql';

const url =
  process.argv[2] ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'locks-sql-')), 'locks.db')}`;
const database = await openDatabase(url);
const locks = sqlLockProvider(database, { ttlMs: 5000 });

const lease = await locks.acquire('workflow/42', { timeoutMs: 5000 });
lease.lost.addEventListener('abort', () => console.log('lost the lock: stop working'));
console.log(`owner of workflow/42 with token ${lease.token > 0n}`);
console.log(`holder pid matches: ${(await locks.holder('workflow/42'))?.pid === process.pid}`);

try {
  await locks.acquire('workflow/42', { timeoutMs: 50 });
} catch (error) {
  if (RiggingError.hasCode(error, 'locks.timeout')) console.log('second acquire timed out');
}

await lease.release();
await locks.close();
await database.close();
