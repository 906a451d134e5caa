import { join } from 'node:path';
import type { Database } from '@rigging/sql';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import type { MinicloudTables } from '../migrations.js';
import type { Output } from '../output.js';
import type { WorkerPool } from '../workers.js';
import { chaosStep } from './chaos.js';
import { deployStep, repositoryStep } from './deploy.js';
import { queueStep } from './queue.js';
import { reshapeStep } from './reshape.js';
import { teardownStep } from './teardown.js';
import { emptySummary, type DemoStep, type DemoSummary } from './types.js';

/** The demo's steps after the database is ready, in story order. */
export const demoSteps: readonly DemoStep[] = [
  reshapeStep,
  repositoryStep,
  deployStep,
  queueStep,
  teardownStep,
];

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

/**
 * Runs the demo story (every step of {@link demoSteps}) against an open cloud, prints progress
 * and the summary to `out`, and records the run in `minicloud_runs`. Used by `minicloud demo` and
 * by `minicloud serve` (`POST /api/demo`), so the dashboard can watch the same story.
 */
export async function runDemoStory(ctx: {
  database: Database<MinicloudTables>;
  config: Config;
  out: Output;
  cloud: Cloud;
  /** Worker processes running the flows and ops (`--workers`); none: this process runs them. */
  workers?: WorkerPool | undefined;
  /** `--chaos`: kill a worker mid-flow and prove the takeover (needs 2+ workers). */
  chaos?: boolean;
}): Promise<{ runId: number; summary: DemoSummary }> {
  const { database, config, out, cloud, workers } = ctx;
  const runId = await startRun(database);
  const summary = emptySummary();
  summary.workers = workers?.pids().length ?? 0;
  const steps = ctx.chaos
    ? demoSteps.flatMap((s) => (s.label === 'deploy' ? [s, chaosStep] : [s]))
    : demoSteps;
  try {
    const detail = (text: string) => out.line(`${' '.repeat(12)}${text}`);
    for (const step of steps) {
      out.line(`  ${step.label}…`);
      const t0 = Date.now();
      const line = await step.run({
        database,
        config,
        out,
        runId,
        cloud,
        summary,
        detail,
        workers,
      });
      const ms = Date.now() - t0;
      summary.steps.push({ label: step.label, ms, line });
      out.step(step.label, `${line} [${ms} ms]`);
    }
    const c = cloud.cacheCounters;
    summary.packages.hits = c.hits;
    summary.packages.misses = c.misses;
    summary.packages.downloads = c.misses; // every miss downloaded once, in whichever process
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
  return { runId, summary };
}

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
  if (s.workers)
    out.step('workers', `${s.workers} worker processes ran the flows and container ops`);
  if (s.chaos) {
    const c = s.chaos;
    out.step(
      'chaos',
      `worker ${c.killed} SIGKILLed mid-flow; ${c.env} ${c.deployed ? 'deployed' : 'NOT deployed'} by ${c.successor ?? 'another worker'} (${c.resources}/${c.expectedResources} resources); ${c.completedRerun} completed tasks re-run, in-flight re-run: ${c.inFlightRerun.join(', ') || 'none'}`,
    );
    out.step(
      '',
      `${c.ops} container ops: ${c.opsLost} lost, ${c.opsAppliedTwice} applied twice, ${c.opsTakenOver} taken over (${c.opsInFlightRerun} in flight re-run)`,
    );
  }
  out.step('data', `database ${where.database}`);
  out.step('', `package cache ${where.packages}`);
  out.step('', `package repository ${where.repository}`);
}
