import { rmSync } from 'node:fs';
import { openDatabase, redactUrl, type Database } from '@rigging/sql';
import { CommandError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import type { Command, CommandContext } from './types.js';

/** One step of the demo. Later packages add theirs (reshape, deploy, queue, teardown). */
export interface DemoStep {
  label: string;
  run(database: Database<MinicloudTables>, ctx: CommandContext): Promise<string>;
}

const migrateStep: DemoStep = {
  label: 'migrated',
  async run(database) {
    const { applied, version } = await database.migrate(NAMESPACE, migrations);
    return `${NAMESPACE} schema v${version} (${
      applied.length ? `applied: ${applied.join(', ')}` : 'already up to date'
    })`;
  },
};

/** The demo's steps, in order. */
export const demoSteps: DemoStep[] = [migrateStep];

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

function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true });
}

export const demo: Command = {
  name: 'demo',
  summary: 'set up a database, run the demo scenario, print what happened',
  usage: [
    'minicloud demo [--database <url>] [--fresh]',
    '',
    '  --fresh   start from an empty database (deletes the SQLite file first; SQLite only)',
  ],
  options: { fresh: { type: 'boolean' } },
  async run(ctx) {
    const { config, out } = ctx;
    const started = Date.now();
    if (ctx.values.fresh) {
      if (config.sqliteFile) removeSqliteFile(config.sqliteFile);
      else if (config.databaseUrl !== 'sqlite::memory:') {
        throw new CommandError(
          'minicloud.fresh_unsupported',
          `--fresh only deletes SQLite files; to start ${redactUrl(config.databaseUrl)} afresh, drop and recreate that database yourself`,
        );
      }
    }
    await using database = await openDatabase<MinicloudTables>(config.databaseUrl);
    out.line('minicloud demo');
    out.step(
      'database',
      `${database.url}${config.databaseSource === 'default' ? ' (default)' : ` (from ${config.databaseSource})`}${ctx.values.fresh ? ', fresh' : ''}`,
    );
    for (const step of demoSteps) out.step(step.label, await step.run(database, ctx));
    const run = await startRun(database);
    await database.db
      .updateTable('minicloud_runs')
      .set({ status: 'ok', finished_at: Date.now() })
      .where('id', '=', run)
      .execute();
    const total = await database.db
      .selectFrom('minicloud_runs')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .executeTakeFirstOrThrow();
    out.step('recorded', `run #${run} in minicloud_runs (${Number(total.n)} so far)`);
    out.line(`done in ${Date.now() - started} ms`);
  },
};
