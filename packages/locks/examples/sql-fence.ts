// Fencing a write in SQL: the write commits only if its lease's token is not lower than the
// highest one already seen for that resource, so a holder that lost its lease while paused cannot
// overwrite the work of the holder that came after it.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RiggingError, fencingTokenFromJson, fencingTokenToJson } from '@rigging/core';
import { openDatabase, sql } from '@rigging/sql';
import { sqlFencingGuard, sqlLockProvider } from '@rigging/locks/sql';

const url =
  process.argv[2] ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'locks-fence-')), 'app.db')}`;
const database = await openDatabase(url);
const locks = sqlLockProvider(database);
const fences = sqlFencingGuard(database);
await fences.migrate();
await sql`create table if not exists docs (id varchar(64) primary key, body text)`.execute(
  database.db,
);
await sql`insert into docs (id, body) values ('doc-1', 'draft')`.execute(database.db);

/** A write fenced by `token`: the check and the update commit together or not at all. */
async function save(body: string, token: bigint): Promise<void> {
  await database.transaction(async (trx) => {
    await fences.check(trx, 'doc-1', token);
    await sql`update docs set body = ${body} where id = 'doc-1'`.execute(trx);
  });
}

// worker A takes the lock; its token travels in a JSON job payload
const first = await locks.acquire('doc-1');
const job = JSON.stringify({ doc: 'doc-1', token: fencingTokenToJson(first.token) });
// … A stalls, and its lease ends (here: released) before it writes …
await first.release();

// worker B takes the lock with a higher token and writes
const second = await locks.acquire('doc-1');
await save('written by B', second.token);
await second.release();

// A wakes up and writes with the token from its payload: refused, nothing changes
try {
  await save('written by A', fencingTokenFromJson((JSON.parse(job) as { token: unknown }).token));
} catch (error) {
  if (RiggingError.hasCode(error, 'locks.stale')) console.log("A's stale write was refused");
}
const rows = await sql<{ body: string }>`select body from docs where id = 'doc-1'`.execute(
  database.db,
);
console.log(`doc-1: ${rows.rows[0]?.body}`);

await locks.close();
await database.close();
