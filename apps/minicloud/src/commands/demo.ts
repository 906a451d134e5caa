import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase, redactUrl, type Database } from '@rigging/sql';
import { openCloud } from '../cloud/index.js';
import { CommandError } from '../errors.js';
import { createLogger } from '../logger.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import type { Output } from '../output.js';
import { demoSteps, emptySummary, type DemoSummary } from '../steps/index.js';
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

    const runId = await startRun(database);
    const summary = emptySummary();
    try {
      await using cloud = await openCloud({
        database,
        dataDir: config.dataDir,
        logger: createLogger(),
      });
      const detail = (text: string) => out.line(`${' '.repeat(12)}${text}`);
      for (const step of demoSteps) {
        out.line(`  ${step.label}…`);
        const t0 = Date.now();
        const line = await step.run({ database, config, out, runId, cloud, summary, detail });
        const ms = Date.now() - t0;
        summary.steps.push({ label: step.label, ms, line });
        out.step(step.label, `${line} [${ms} ms]`);
      }
      const c = cloud.cacheCounters;
      summary.packages.hits = c.hits;
      summary.packages.misses = c.misses;
      summary.packages.downloads = c.downloads;
      printSummary(out, summary, {
        database: database.url,
        packages: join(config.dataDir, 'packages'),
        repository: join(config.dataDir, 'repository'),
      });
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

/** The demo's closing summary: what ran, how long, what was reverted, the cache, the data. */
export function printSummary(
  out: Output,
  s: DemoSummary,
  where: { database: string; packages: string; repository: string },
): void {
  out.line('summary');
  out.step('ran', s.steps.map((x) => `${x.label} ${x.ms} ms`).join(', '));
  for (const d of s.deployments) {
    if (d.retried.length)
      out.step('retried', `${d.env}: ${d.retried.join(', ')} (succeeded on a later attempt)`);
  }
  for (const d of s.deployments) {
    if (!d.ok)
      out.step(
        'reverted',
        `${d.env} after ${d.failure}, in reverse order: ${d.reverted.join(', ')}`,
      );
  }
  if (!s.deployments.some((d) => !d.ok)) out.step('reverted', 'nothing');
  const p = s.packages;
  out.step(
    'cache',
    `${p.hits} hits, ${p.misses} misses, ${p.downloads} downloads, ${p.uploads} uploads, ${p.cleaned.length} outdated copies cleaned`,
  );
  const q = s.containers;
  out.step(
    'queue',
    `${q.succeeded} ops succeeded, ${q.failed} failed, ${q.cancelled} cancelled; blocked: ${q.blocked.join(', ') || 'none'}`,
  );
  if (s.reshape) {
    out.step(
      'tree',
      `${s.reshape.providers} providers; ${s.reshape.reshaped ? `${s.reshape.moved} consumers moved this run` : 'reshaped earlier'}; ${s.reshape.lost} allocations lost`,
    );
  }
  if (s.teardown) {
    out.step(
      'destroyed',
      `${s.teardown.env}: ${s.teardown.order.join(', ')}; ${s.teardown.released} allocations released`,
    );
  }
  out.step('data', `database ${where.database}`);
  out.step('', `package cache ${where.packages}`);
  out.step('', `package repository ${where.repository}`);
}
