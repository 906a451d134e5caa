import { sleep } from '@rigging/core';
import type { Cloud } from '../cloud/index.js';
import { CommandError } from '../errors.js';
import { APP } from './deploy.js';
import type { ChaosReport, DemoStep, StepContext } from './types.js';

const ENV = 'env-3';
const CONTAINERS = ['ctr-4', 'ctr-5', 'ctr-6', 'ctr-7'];
const OPS = ['create', 'start', 'stop'] as const;
/** network, 3 volumes, 3 VMs, app config */
const EXPECTED_RESOURCES = 8;

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new CommandError('minicloud.chaos_stuck', `chaos: ${what} did not happen in ${ms} ms`);
    await sleep(50);
  }
}

type Db = StepContext['database']['db'];
type History = Awaited<ReturnType<Cloud['engine']['history']>>;

/**
 * Deploys {@link ENV} on the workers with vm-2 set to hang on its first run; resolves once it
 * hangs, with the flow id and the pid of the worker that runs it.
 */
async function deployUntilStalled(ctx: StepContext) {
  const { cloud, detail } = ctx;
  const db = ctx.database.db;
  if (await cloud.environments().then((e) => e.some((x) => x.name === ENV))) {
    detail(`${ENV} left by an interrupted run: tearing it down first`);
    await cloud.deleteEnvironment(ENV);
  }
  detail(`${ENV}: deploying on the workers; vm-2 will hang on its first run`);
  const deploying = cloud.deployEnvironment(ENV, { package: APP, faults: { stallOnce: 'vm-2' } });
  deploying.catch(() => {});
  const flowId = await until('the deploy flow to start', 60_000, async () => {
    const row = await db
      .selectFrom('minicloud_environments')
      .select('flow_id')
      .where('name', '=', ENV)
      .executeTakeFirst();
    return row?.flow_id;
  });
  const stallRef = `${flowId}/vm-2`;
  const victim = await until('vm-2 to stall', 60_000, async () => {
    const row = await db
      .selectFrom('minicloud_journal')
      .select('pid')
      .where('kind', '=', 'stall')
      .where('ref', '=', stallRef)
      .executeTakeFirst();
    return row ? Number(row.pid) : undefined;
  });
  return { deploying, flowId, stallRef, victim };
}

/** Casts every op of {@link OPS} on every container of {@link CONTAINERS}; their ids. */
async function castOps(cloud: Cloud): Promise<string[]> {
  const ids: string[] = [];
  for (const op of OPS) {
    for (const key of CONTAINERS) {
      ids.push(
        await cloud.castContainerOp(key, op, {
          durationMs: 250,
          ...(op === 'create' ? { image: 'nginx:1.27' } : {}),
        }),
      );
    }
  }
  return ids;
}

/** An op of `ids` that `victim` has started and not applied yet, once there is one. */
function opHeldBy(db: Db, victim: number, ids: string[]): Promise<string> {
  return until('the killed worker to take a container op', 10_000, async () => {
    const started = await db
      .selectFrom('minicloud_journal')
      .select('ref')
      .where('kind', '=', 'op-start')
      .where('pid', '=', victim)
      .where('ref', 'in', ids)
      .execute();
    for (const s of started) {
      const applied = await db
        .selectFrom('minicloud_journal')
        .select('ref')
        .where('kind', '=', 'op')
        .where('ref', '=', s.ref)
        .executeTakeFirst();
      if (!applied) return s.ref;
    }
    return undefined;
  });
}

/** The tasks that succeeded in `history`. */
function succeeded(history: History): Set<string> {
  return new Set(history.filter((e) => e.state === 'SUCCESS' && e.task).map((e) => e.task!));
}

/** What the task log says about the flow's tasks around the kill at `killedAt`. */
function flowReruns(before: History, after: History, killedAt: number) {
  const doneBefore = succeeded(before);
  const rerun = after.filter((e) => e.state === 'RUNNING' && e.task && e.at >= killedAt);
  // Tasks done before the kill that ran again, or succeeded twice (either is a double run).
  const successes = new Map<string, number>();
  for (const e of after) {
    if (e.state === 'SUCCESS' && e.task) successes.set(e.task, (successes.get(e.task) ?? 0) + 1);
  }
  const completedRerun = new Set([
    ...rerun.filter((e) => doneBefore.has(e.task!)).map((e) => e.task!),
    ...[...successes].filter(([, n]) => n > 1).map(([task]) => task),
  ]).size;
  const inFlightRerun = [
    ...new Set(rerun.filter((e) => !doneBefore.has(e.task!)).map((e) => e.task!)),
  ].filter((t) => before.some((e) => e.task === t && e.state === 'RUNNING'));
  return { doneBeforeKill: doneBefore.size, completedRerun, inFlightRerun };
}

/** Waits for the ops `ids`, then counts from the queue and the journal how each one ended. */
async function opOutcomes(cloud: Cloud, db: Db, ids: string[], victim: number) {
  for (const id of ids) await cloud.queue.wait(id, { timeoutMs: 120_000 }).catch(() => {});
  let lost = 0;
  let takenOver = 0;
  for (const id of ids) {
    const op = await cloud.queue.get(id);
    if (op?.status !== 'succeeded') lost++;
    if ((op?.attempts ?? 0) > 1) takenOver++;
  }
  // An op the killed worker applied but could not report done runs again (at-least-once,
  // idempotent handlers); an op applied twice by live workers would be a double run.
  const applied = await db
    .selectFrom('minicloud_journal')
    .select(['ref', 'pid'])
    .where('kind', '=', 'op')
    .where('ref', 'in', ids)
    .execute();
  const byLive = new Map<string, number>();
  const reapplied = new Set<string>();
  for (const a of applied) {
    if (Number(a.pid) === victim) reapplied.add(a.ref);
    else byLive.set(a.ref, (byLive.get(a.ref) ?? 0) + 1);
  }
  return {
    opsTakenOver: takenOver,
    opsLost: lost,
    opsAppliedTwice: [...byLive.values()].filter((n) => n > 1).length,
    opsInFlightRerun: [...reapplied].filter((ref) => byLive.has(ref)).length,
  };
}

/** Deletes {@link ENV} and the containers. */
async function cleanUp(cloud: Cloud): Promise<void> {
  await cloud.deleteEnvironment(ENV);
  const deletes = await Promise.all(
    CONTAINERS.map((key) => cloud.castContainerOp(key, 'delete', { durationMs: 10 })),
  );
  await Promise.all(deletes.map((id) => cloud.queue.wait(id, { timeoutMs: 60_000 })));
}

/**
 * `--chaos` (with `--workers`): deploys env-3 while container ops run, SIGKILLs the worker that
 * runs the flow in the middle of it (vm-2 in flight, stalled there on purpose) and preferably
 * while it also holds a container op; the other workers take the flow and the ops over once the
 * lease expires. Then it proves from the task log, the journal and the resources that nothing
 * was lost and nothing completed was done twice, and deletes env-3.
 */
export const chaosStep: DemoStep = {
  label: 'chaos',
  async run(ctx: StepContext) {
    const { cloud, detail, workers, summary } = ctx;
    if (!workers || workers.pids().length < 2) {
      throw new CommandError('minicloud.chaos_needs_workers', '--chaos needs --workers 2 or more');
    }
    const db = ctx.database.db;
    const { deploying, flowId, stallRef, victim } = await deployUntilStalled(ctx);
    const ids = await castOps(cloud);
    detail(`cast ${ids.length} container ops (${OPS.join(', ')} × ${CONTAINERS.join(', ')})`);
    const before = await cloud.engine.history(flowId);
    // Kill while the victim also holds a container op, if it takes one within 10 s.
    const victimOp = await opHeldBy(db, victim, ids).catch(() => null);
    detail(
      `SIGKILL worker ${victim}: it runs ${flowId} (${succeeded(before).size} tasks done, vm-2 in flight)${victimOp ? ` and container op ${victimOp}` : ''}`,
    );
    const killedAt = Date.now();
    await workers.kill(victim);

    const result = await deploying;
    const reruns = flowReruns(before, await cloud.engine.history(flowId), killedAt);
    const passed = await db
      .selectFrom('minicloud_journal')
      .select('pid')
      .where('kind', '=', 'stall-passed')
      .where('ref', '=', stallRef)
      .executeTakeFirst();
    const successor = passed ? Number(passed.pid) : null;
    detail(
      `${ENV} ${result.ok ? 'deployed' : 'NOT deployed'} after the takeover${successor ? ` by worker ${successor}` : ''} in ${result.durationMs} ms`,
    );

    const ops = await opOutcomes(cloud, db, ids, victim);
    const resources = await db
      .selectFrom('minicloud_resources')
      .select('id')
      .where('env', '=', ENV)
      .execute();
    const report: ChaosReport = {
      env: ENV,
      flowId,
      killed: victim,
      successor,
      ...reruns,
      deployed: result.ok,
      resources: resources.length,
      expectedResources: EXPECTED_RESOURCES,
      ops: ids.length,
      ...ops,
    };
    summary.chaos = report;
    detail(
      `task log: ${report.doneBeforeKill} tasks done before the kill, ${report.completedRerun} of them run again; in flight and re-run: ${report.inFlightRerun.join(', ') || 'none'}`,
    );
    detail(
      `container ops: ${ids.length - ops.opsLost}/${ids.length} succeeded, ${ops.opsTakenOver} taken over from the killed worker (${ops.opsInFlightRerun} of them had applied their effect but not reported it: run again, idempotent), ${ops.opsAppliedTwice} applied twice by live workers (journal)`,
    );
    await cleanUp(cloud);
    detail(`${ENV} and ${CONTAINERS.join(', ')} deleted`);
    const ok =
      report.deployed &&
      report.completedRerun === 0 &&
      ops.opsLost === 0 &&
      ops.opsAppliedTwice === 0 &&
      report.resources === EXPECTED_RESOURCES;
    return `worker ${victim} killed mid-flow; ${ENV} finished by ${successor ?? 'another worker'}; ${ok ? 'nothing lost, nothing done twice' : 'CHECK FAILED'}`;
  },
};
