// Open a database by URL (SQLite file by default), migrate a namespace, write in a retrying
// transaction, read with a prepared Kysely query. Run: npx tsx examples/notes.ts [database-url]
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  identityPrimaryKey,
  openDatabase,
  prepareQuery,
  type Generated,
  type Migration,
} from '@rigging/sql';

interface Tables {
  notes_note: { id: Generated<number>; title: string; created_at: number };
}

const migrations: Migration[] = [
  {
    name: 'create notes_note',
    up: async (db, { dialect }) => {
      await db.schema
        .createTable('notes_note')
        .addColumn('id', 'integer', identityPrimaryKey(dialect))
        .addColumn('title', 'varchar(200)', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
];

const url = process.argv[2] ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'notes-')), 'notes.db')}`;
const database = await openDatabase<Tables>(url);
try {
  const { applied, version } = await database.migrate('notes', migrations);
  console.log(`migrated 'notes' to version ${version} (applied: ${applied.join(', ') || 'none'})`);

  await database.transaction(async (trx) => {
    await trx
      .insertInto('notes_note')
      .values([
        { title: 'buy GPUs', created_at: Date.now() },
        { title: 'reshape them', created_at: Date.now() },
      ])
      .execute();
  });

  // A read that runs on every request: built and compiled once, then run with new values.
  const titlesSince = prepareQuery((db, p: { since: number }) =>
    db.selectFrom('notes_note').select('title').where('created_at', '>=', p.since).orderBy('id'),
  );
  const { rows } = await titlesSince.execute(database.db, { since: 0 });
  console.log(`${database.dialect}: ${rows.map((n) => n.title).join(' → ')}`);
} finally {
  await database.close();
}
