import type { Api } from './api.js';
import type { FaultRecord } from './faults.js';
import type { LoadReport } from './load.js';
import type { ClusterState, OpRow } from './state.js';

/** The end of a run: what must be zero, and the figures. */
export interface Verdict {
  submitted: number;
  succeeded: number;
  failedByDesign: number;
  /** Failed or cancelled although nothing asked for it. Must be 0. */
  failedUnexpectedly: number;
  /** Never finished. Must be 0. */
  lost: number;
  /** A flow's completed task run again (an effect applied twice). Must be 0. */
  doubleApplied: number;
  /** An op of a key began before the previous op of that key was applied. Must be 0. */
  orderViolations: number;
  /** A provider whose usage exceeds its capacity. Must be 0. */
  overCapacity: number;
  /** Flows neither completed nor reverted. Must be 0. */
  halfDoneFlows: number;
  flowStates: Record<string, number>;
  /** Ops re-run after a takeover whose effect had already been applied (idempotent re-run). */
  rerunAfterTakeover: number;
  takeoverMs: { p50: number; max: number; count: number };
  staleWritesRefused: number;
  /** Container ops per second, first submission to last completion. */
  opsPerSecond: number;
  opLatencyMs: { p50: number; p99: number };
  placementWrites: number;
  placementRefusedByCapacity: number;
  placementLatencyMs: { p50: number; p99: number };
  problems: string[];
}

const FINAL = new Set(['succeeded', 'failed', 'cancelled']);
/** Flow states that end a flow: completed or reverted. */
const ENDED = new Set(['SUCCESS', 'REVERTED']);

/** The p-th percentile (0..100) of `values`, 0 when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Waits until every submitted op has ended (or `waitMs` passed); returns the ops as stored. */
export async function drain(
  state: ClusterState,
  ids: readonly string[],
  waitMs: number,
): Promise<Map<string, OpRow>> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const ops = await state.ops(ids);
    const open = ids.filter((id) => !FINAL.has(ops.get(id)?.status ?? ''));
    if (open.length === 0 || Date.now() >= deadline) return ops;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** Every provider's usage against its capacity, through the Placement API. */
async function overCapacity(api: Api, problems: string[]): Promise<number> {
  const list = await api.placement('GET', '/resource_providers');
  let over = 0;
  for (const rp of (list.body?.resource_providers ?? []) as { uuid: string; name: string }[]) {
    const inv = (await api.placement('GET', `/resource_providers/${rp.uuid}/inventories`)).body
      ?.inventories as Record<
      string,
      { total: number; reserved: number; allocation_ratio: number }
    >;
    const usages = (await api.placement('GET', `/resource_providers/${rp.uuid}/usages`)).body
      ?.usages as Record<string, number>;
    for (const [rc, used] of Object.entries(usages ?? {})) {
      const i = inv?.[rc];
      const capacity = i ? (i.total - i.reserved) * i.allocation_ratio : 0;
      if (used > capacity) {
        over++;
        problems.push(`${rp.name} ${rc}: usage ${used} over capacity ${capacity}`);
      }
    }
  }
  return over;
}

/** Per key, an op that began before the previous op of its key was applied. */
function orderViolations(
  load: LoadReport,
  journal: Awaited<ReturnType<ClusterState['journal']>>,
  problems: string[],
): number {
  const firstStart = new Map<string, number>();
  const firstApplied = new Map<string, number>();
  for (const row of journal) {
    const map = row.kind === 'op-start' ? firstStart : firstApplied;
    if (!map.has(row.ref)) map.set(row.ref, row.at);
  }
  const byKey = new Map<string, LoadReport['ops']>();
  for (const op of load.ops) byKey.set(op.key, [...(byKey.get(op.key) ?? []), op]);
  let violations = 0;
  for (const [key, ops] of byKey) {
    ops.sort((a, b) => a.index - b.index);
    for (let i = 1; i < ops.length; i++) {
      const previous = firstApplied.get(ops[i - 1]!.id);
      const start = firstStart.get(ops[i]!.id);
      if (previous !== undefined && start !== undefined && start < previous) {
        violations++;
        problems.push(
          `${key}: op ${ops[i]!.index} began before op ${ops[i - 1]!.index} was applied`,
        );
      }
    }
  }
  return violations;
}

/** Computes the verdict of a run once its load is over. */
export async function verdict(options: {
  api: Api;
  state: ClusterState;
  load: LoadReport;
  faults: readonly FaultRecord[];
  drainMs: number;
}): Promise<Verdict> {
  const { api, state, load, faults } = options;
  const problems: string[] = [];
  const ops = await drain(
    state,
    load.ops.map((o) => o.id),
    options.drainMs,
  );
  let succeeded = 0;
  let failedByDesign = 0;
  let failedUnexpectedly = 0;
  let lost = 0;
  for (const op of load.ops) {
    const row = ops.get(op.id);
    const status = row?.status ?? 'missing';
    if (status === 'succeeded' && !op.byDesign) succeeded++;
    else if (status === 'failed' && op.byDesign) failedByDesign++;
    else if (FINAL.has(status)) {
      failedUnexpectedly++;
      problems.push(
        `op ${op.id} (${op.key} #${op.index} ${op.type}): ${status}${row?.error ? `: ${row.error}` : ''}`,
      );
    } else {
      lost++;
      problems.push(`op ${op.id} (${op.key} #${op.index} ${op.type}): never finished (${status})`);
    }
  }
  const journal = await state.journal();
  const applied = new Map<string, number>();
  for (const row of journal) {
    if (row.kind === 'op') applied.set(row.ref, (applied.get(row.ref) ?? 0) + 1);
  }
  const twice = await state.tasksRunTwice();
  for (const t of twice)
    problems.push(`flow ${t.flowId}: task ${t.task} succeeded ${t.times} times`);
  const states = await state.flowStates();
  const halfDone = [...states].filter(([s]) => !ENDED.has(s)).reduce((n, [, c]) => n + c, 0);
  if (halfDone) problems.push(`flows not ended: ${JSON.stringify(Object.fromEntries(states))}`);
  const takeover = faults.flatMap((f) => f.takeoverMs);
  for (const f of faults) {
    for (const op of f.notTakenOver) problems.push(`${f.kind} ${f.host}: op ${op} not taken over`);
  }
  const rows = [...ops.values()].filter((o) => o.finishedAt !== undefined);
  const first = Math.min(...rows.map((o) => o.createdAt));
  const last = Math.max(...rows.map((o) => o.finishedAt!));
  for (const failure of [
    ...load.placement.failed,
    ...load.deploys.failed,
    ...load.reshapes.failed,
  ]) {
    problems.push(failure);
  }
  return {
    submitted: load.ops.length,
    succeeded,
    failedByDesign,
    failedUnexpectedly,
    lost,
    doubleApplied: twice.length,
    orderViolations: orderViolations(load, journal, problems),
    overCapacity: await overCapacity(api, problems),
    halfDoneFlows: halfDone,
    flowStates: Object.fromEntries(states),
    rerunAfterTakeover: [...applied.values()].filter((n) => n > 1).length,
    takeoverMs: {
      p50: percentile(takeover, 50),
      max: takeover.length ? Math.max(...takeover) : 0,
      count: takeover.length,
    },
    staleWritesRefused: faults.reduce((n, f) => n + f.staleRefusals.length, 0),
    opsPerSecond: rows.length && last > first ? (rows.length * 1000) / (last - first) : 0,
    opLatencyMs: {
      p50: percentile(
        rows.map((o) => o.finishedAt! - o.createdAt),
        50,
      ),
      p99: percentile(
        rows.map((o) => o.finishedAt! - o.createdAt),
        99,
      ),
    },
    placementWrites: load.placement.writes,
    placementRefusedByCapacity: load.placement.refusedCapacity,
    placementLatencyMs: {
      p50: percentile(load.placement.latencies, 50),
      p99: percentile(load.placement.latencies, 99),
    },
    problems,
  };
}

/** True when every count that must be zero is zero. */
export function verdictHolds(v: Verdict): boolean {
  return (
    v.lost === 0 &&
    v.failedUnexpectedly === 0 &&
    v.doubleApplied === 0 &&
    v.orderViolations === 0 &&
    v.overCapacity === 0 &&
    v.halfDoneFlows === 0 &&
    v.problems.length === 0
  );
}
