import { rmSync } from 'node:fs';
import { openDatabase, redactUrl, type Database } from '@rigging/sql';
import { CommandError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import { demoSteps } from '../steps/index.js';
import type { Command } from './types.js';

async function startRun(database: Database<MinicloudTables>): Promise<number> {
  const values = { command: 'demo', status: 'running' as const, started_at: Date.now() };
  if (database.dialect === 'postgres') {
    const row = await database.db
      .insertInto('minicloud_runs')
      .values(values)
      .returning('id')
      .executeTakeFirstOrThrow();
    return Number(row.id);
  }
  const result = await database.db.insertInto('minicloud_runs').values(values).executeTakeFirst();
  return Number(result.insertId);
}

async function finishRun(
  database: Database<MinicloudTables>,
  id: number,
  status: 'ok' | 'failed',
): Promise<void> {
  await database.db
    .updateTable('minicloud_runs')
    .set({ status, finished_at: Date.now() })
    .where('id', '=', id)
    .execute();
}

function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true });
}

export const demo: Command = {
  name: 'demo',
  summary: 'set up a database, run the demo scenario, print what happened',
  usage: [
    'Usage: minicloud demo [--database <url>] [--fresh]',
    '',
    '  --database <url>  where minicloud keeps its state (default: $MINICLOUD_DATABASE_URL,',
    '                    else sqlite:.minicloud/minicloud.db)',
    '  --fresh           start from an empty database (deletes the SQLite file first; SQLite only)',
  ],
  options: { fresh: { type: 'boolean' } },
  async run({ config, out, values }) {
    const started = Date.now();
    const fresh = values.fresh === true;
    if (fresh && !config.sqliteFile && config.databaseUrl !== 'sqlite::memory:') {
      throw new CommandError(
        'minicloud.fresh_unsupported',
        `--fresh only deletes SQLite files; to start ${redactUrl(config.databaseUrl)} afresh, drop and recreate that database yourself`,
      );
    }
    if (fresh && config.sqliteFile) removeSqliteFile(config.sqliteFile);

    await using database = await openDatabase<MinicloudTables>(config.databaseUrl);
    out.line('minicloud demo');
    const source =
      config.databaseSource === 'default' ? 'default' : `from ${config.databaseSource}`;
    out.step('database', `${database.url} (${source})${fresh ? ', fresh' : ''}`);

    const { applied, version } = await database.migrate(NAMESPACE, migrations);
    out.step(
      'migrated',
      `${NAMESPACE} schema v${version} (${
        applied.length ? `applied: ${applied.join(', ')}` : 'already up to date'
      })`,
    );

    const runId = await startRun(database);
    try {
      for (const step of demoSteps) {
        out.step(step.label, await step.run({ database, config, out, runId }));
      }
    } catch (error) {
      await finishRun(database, runId, 'failed').catch(() => {});
      throw error;
    }
    await finishRun(database, runId, 'ok');
    const total = await database.db
      .selectFrom('minicloud_runs')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .executeTakeFirstOrThrow();
    out.step('recorded', `run #${runId} in minicloud_runs (${Number(total.n)} so far)`);
    out.line(`done in ${Date.now() - started} ms`);
  },
};
