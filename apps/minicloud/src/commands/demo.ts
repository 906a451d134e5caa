import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase, redactUrl } from '@rigging/sql';
import { openCloud } from '../cloud/index.js';
import { CommandError } from '../errors.js';
import { createLogger } from '../logger.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import { runDemoStory } from '../steps/story.js';
import { runRemoteDemo } from './demo-remote.js';
import type { Command } from './types.js';

function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true });
}

export const demo: Command = {
  name: 'demo',
  summary: 'set up a database, run the demo scenario, print what happened',
  usage: [
    'Usage: minicloud demo [--database <url>] [--fresh] [--server <url>]',
    '',
    '  --database <url>  where minicloud keeps its state (default: $MINICLOUD_DATABASE_URL,',
    '                    else sqlite:.minicloud/minicloud.db)',
    '  --fresh           start from an empty database (deletes the SQLite file first; SQLite only)',
    '  --server <url>    run the story inside a running `minicloud serve` (its dashboard shows it)',
  ],
  options: { fresh: { type: 'boolean' }, server: { type: 'string' } },
  async run({ config, out, values }) {
    const started = Date.now();
    if (typeof values.server === 'string') {
      await runRemoteDemo(values.server, out);
      out.line(`done in ${Date.now() - started} ms`);
      return;
    }
    const fresh = values.fresh === true;
    if (fresh && !config.sqliteFile && config.databaseUrl !== 'sqlite::memory:') {
      throw new CommandError(
        'minicloud.fresh_unsupported',
        `--fresh only deletes SQLite files; to start ${redactUrl(config.databaseUrl)} afresh, drop and recreate that database yourself`,
      );
    }
    if (fresh && config.sqliteFile) removeSqliteFile(config.sqliteFile);
    if (fresh) {
      for (const dir of ['packages', 'repository']) {
        rmSync(join(config.dataDir, dir), { recursive: true, force: true });
      }
    }

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

    await using cloud = await openCloud({
      database,
      dataDir: config.dataDir,
      logger: createLogger(),
    });
    await runDemoStory({ database, config, out, cloud });
    out.line(`done in ${Date.now() - started} ms`);
  },
};
