import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase, redactUrl } from '@rigging/sql';
import { openCloud } from '../cloud/index.js';
import { CommandError, UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import { runDemoStory } from '../steps/story.js';
import { startWorkers } from '../workers.js';
import { runRemoteDemo } from './demo-remote.js';
import { intOption } from './options.js';
import type { Command } from './types.js';

function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true });
}

export const demo: Command = {
  name: 'demo',
  summary: 'set up a database, run the demo scenario, print what happened',
  usage: [
    'Usage: minicloud demo [--database <url>] [--fresh] [--server <url>] [--workers <n> [--chaos]]',
    '',
    '  --database <url>  where minicloud keeps its state (default: $MINICLOUD_DATABASE_URL,',
    '                    else sqlite:.minicloud/minicloud.db)',
    '  --fresh           start from an empty database (deletes the SQLite file first; SQLite only)',
    '  --server <url>    run the story inside a running `minicloud serve` (its dashboard shows it)',
    '                    (token from $MINICLOUD_TOKEN or $MINICLOUD_ADMIN_TOKEN when it needs one)',
    '  --workers <n>     run flows and container ops on n `minicloud worker` processes (0-16)',
    '  --chaos           with --workers 2+: SIGKILL the worker running a flow mid-flow and prove',
    '                    the takeover: nothing lost, nothing done twice',
  ],
  options: {
    fresh: { type: 'boolean' },
    server: { type: 'string' },
    workers: { type: 'string' },
    chaos: { type: 'boolean' },
  },
  async run({ config, out, values }) {
    const started = Date.now();
    if (typeof values.server === 'string') {
      await runRemoteDemo(values.server, out);
      out.line(`done in ${Date.now() - started} ms`);
      return;
    }
    const fresh = values.fresh === true;
    const workerCount = intOption(values, 'workers', 0, 16) ?? 0;
    const chaos = values.chaos === true;
    if (chaos && workerCount < 2) throw new UsageError('--chaos needs --workers 2 or more');
    if (workerCount > 0 && config.databaseUrl.startsWith('sqlite::memory')) {
      throw new UsageError(
        '--workers needs a database other processes can reach, not sqlite::memory:',
      );
    }
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

    await using database = await openDatabase<MinicloudTables>(
      config.databaseUrl,
      config.databaseOptions,
    );
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

    // With --chaos, a killed worker's work is taken over after 2 s instead of 10 s.
    const leaseMs = chaos ? 2000 : 10_000;
    await using cloud = await openCloud({
      database,
      dataDir: config.dataDir,
      logger: createLogger(),
      worker: workerCount === 0,
      leaseMs,
    });
    const workers = workerCount
      ? await startWorkers({
          count: workerCount,
          databaseUrl: config.databaseUrl,
          dataDir: config.dataDir,
          leaseMs,
        })
      : undefined;
    if (workers) out.step('workers', `${workerCount} started (pids ${workers.pids().join(', ')})`);
    try {
      await runDemoStory({ database, config, out, cloud, workers, chaos });
    } finally {
      await workers?.stop();
    }
    out.line(`done in ${Date.now() - started} ms`);
  },
};
