import type { Api, Answer } from './api.js';
import type { CapacityWatch } from './capacity.js';
import type { FaultRecord } from './faults.js';
import type { LoadReport } from './load.js';
import type { ClusterState, EffectRow, OpRow } from './state.js';

/** The end of a run: what must be zero, and the figures. */
export interface Verdict {
  submitted: number;
  succeeded: number;
  failedByDesign: number;
  /** Failed or cancelled although nothing asked for it. Must be 0. */
  failedUnexpectedly: number;
  /**
   * Never finished, or reported succeeded without an accepted effect in the container runtime's
   * witness. Must be 0.
   */
  lost: number;
  /** Ops with more than one effect accepted by the witness (an effect applied twice). Must be 0. */
  doubleApplied: number;
  /**
   * Per key, an op whose accepted effect has a lower witness sequence number than the previous
   * op's (effects applied out of submission order). Must be 0.
   */
  orderViolations: number;
  /**
   * Provider resource classes seen over capacity: by direct SQL samples during the load and at
   * the end, and through the Placement API at the end. Must be 0.
   */
  overCapacity: number;
  /** Capacity samples taken (a run with none is vacuous). */
  capacitySamples: number;
  /** Effects the witness refused for a stale fencing token (stale writes stopped by fencing). */
  staleEffectsRefused: number;
  /** Completed tasks the task log shows run twice in one flow. Must be 0. */
  tasksRunTwice: number;
  /** Verdict reads that failed (an error, a 401, a 5xx), with reasons in `problems`. Must be 0. */
  readFailures: number;
  /** Container op submissions the API refused (not 202). Must be 0. */
  submissionsRefused: number;
  /** Load requests that got no answer or threw. Must be 0. */
  loadErrors: number;
  /**
   * Why the run proved nothing (no op submitted, a fault that hit no in-flight work or had none
   * taken over). Must be empty.
   */
  vacuous: string[];
  /** Flows neither completed nor reverted. Must be 0. */
  halfDoneFlows: number;
  flowStates: Record<string, number>;
  /** Ops re-run after a takeover whose effect had already been applied (idempotent re-run). */
  rerunAfterTakeover: number;
  takeoverMs: { p50: number; max: number; count: number };
  /** Lines of the fault victims' logs showing a write refused as stale (lease lost, token). */
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

/** A verdict read through the API that did not succeed. */
class ReadFailed extends Error {}

/** `answer` when it is a success; a {@link ReadFailed} naming the read and the status otherwise. */
function ok<T>(what: string, answer: Answer<T>): T {
  if (answer.status < 200 || answer.status > 299) {
    const body = typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
    throw new ReadFailed(`${what}: ${answer.status} ${(body ?? '').slice(0, 200)}`);
  }
  return answer.body;
}

/**
 * Every provider's usage against its capacity, through the Placement API (the view a client
 * has). Adds what is over to `over`; a read that fails throws {@link ReadFailed}.
 */
async function overCapacityThroughApi(api: Api, over: Map<string, string>): Promise<void> {
  const list = ok<{ resource_providers?: { uuid: string; name: string }[] }>(
    'GET /resource_providers',
    await api.placement('GET', '/resource_providers'),
  );
  if (!Array.isArray(list?.resource_providers)) {
    throw new ReadFailed('GET /resource_providers: no resource_providers in the answer');
  }
  for (const rp of list.resource_providers) {
    const { inventories } = ok<{
      inventories: Record<string, { total: number; reserved: number; allocation_ratio: number }>;
    }>(
      `GET /resource_providers/${rp.uuid}/inventories`,
      await api.placement('GET', `/resource_providers/${rp.uuid}/inventories`),
    );
    const { usages } = ok<{ usages: Record<string, number> }>(
      `GET /resource_providers/${rp.uuid}/usages`,
      await api.placement('GET', `/resource_providers/${rp.uuid}/usages`),
    );
    for (const [rc, used] of Object.entries(usages)) {
      const i = inventories[rc];
      const capacity = i ? (i.total - i.reserved) * i.allocation_ratio : 0;
      const id = `${rp.name} ${rc}`;
      if (used > capacity && !over.has(id)) {
        over.set(id, `${id}: usage ${used} over capacity ${capacity} (Placement API)`);
      }
    }
  }
}

/** The accepted effects of each op, lowest sequence number first. */
function acceptedByOp(effects: readonly EffectRow[]): Map<string, EffectRow[]> {
  const byOp = new Map<string, EffectRow[]>();
  for (const e of effects) {
    if (!e.accepted) continue;
    byOp.set(e.op, [...(byOp.get(e.op) ?? []), e]);
  }
  for (const list of byOp.values()) list.sort((a, b) => a.seq! - b.seq!);
  return byOp;
}

/** Per key, an op whose first accepted effect comes before the previous op's (by sequence). */
function orderViolations(
  load: LoadReport,
  accepted: Map<string, EffectRow[]>,
  problems: string[],
): number {
  const byKey = new Map<string, LoadReport['ops']>();
  for (const op of load.ops) byKey.set(op.key, [...(byKey.get(op.key) ?? []), op]);
  let violations = 0;
  for (const [key, ops] of byKey) {
    ops.sort((a, b) => a.index - b.index);
    let previous: { index: number; seq: number } | undefined;
    for (const op of ops) {
      const seq = accepted.get(op.id)?.[0]?.seq;
      if (seq === undefined) continue; // no effect (failed by design, or counted as lost)
      if (previous && seq < previous.seq) {
        violations++;
        problems.push(
          `${key}: op ${op.index}'s effect (seq ${seq}) came before op ${previous.index}'s (seq ${previous.seq})`,
        );
      }
      previous = { index: op.index, seq };
    }
  }
  return violations;
}

/**
 * Computes the verdict of a run once its load is over. Reads the queue, the container runtime's
 * witness, the task log and reshape's usage straight from the database, and the Placement API
 * once; a read that fails is counted in `readFailures` with its reason (the verdict then fails).
 * `apiRead` wraps the API read (self-tests use it to break that read).
 */
export async function verdict(options: {
  api: Api;
  state: ClusterState;
  load: LoadReport;
  faults: readonly FaultRecord[];
  capacity: CapacityWatch;
  drainMs: number;
  apiRead?: <T>(read: () => Promise<T>) => Promise<T>;
}): Promise<Verdict> {
  const { api, state, load, faults, capacity } = options;
  const problems: string[] = [];
  const vacuous: string[] = [];
  const ops = await drain(
    state,
    load.ops.map((o) => o.id),
    options.drainMs,
  );
  const effects = await state.effects();
  const accepted = acceptedByOp(effects);
  let succeeded = 0;
  let failedByDesign = 0;
  let failedUnexpectedly = 0;
  let lost = 0;
  let doubleApplied = 0;
  for (const op of load.ops) {
    const row = ops.get(op.id);
    const status = row?.status ?? 'missing';
    const applied = accepted.get(op.id) ?? [];
    if (applied.length > 1) {
      doubleApplied++;
      problems.push(
        `op ${op.id} (${op.key} #${op.index} ${op.type}): ${applied.length} effects accepted (${applied.map((e) => `${e.host} pid ${e.pid} attempt ${e.attempt} token ${e.token} seq ${e.seq}`).join('; ')})`,
      );
    }
    if (status === 'succeeded' && !op.byDesign && applied.length === 0) {
      lost++;
      problems.push(
        `op ${op.id} (${op.key} #${op.index} ${op.type}): succeeded, but the witness has no effect of it`,
      );
    } else if (status === 'succeeded' && !op.byDesign) succeeded++;
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
  const refused = effects.filter((e) => !e.accepted);
  const twice = await state.tasksRunTwice();
  for (const t of twice)
    problems.push(`flow ${t.flowId}: task ${t.task} succeeded ${t.times} times (task log)`);
  if (load.ops.length === 0) vacuous.push('no container op was submitted');
  for (const f of faults) {
    // A killed process finishes nothing: its op ended without another process starting it.
    if (f.kind === 'kill') {
      for (const op of f.finishedByVictim) {
        problems.push(`kill ${f.host}: op ${op} ended after the kill, started by no other process`);
      }
    }
    if (f.inFlight.length === 0) {
      vacuous.push(`${f.kind} ${f.host}: the fault hit no in-flight work`);
    } else if (f.takeoverMs.length === 0) {
      // The ops seen in flight ended before the fault bit, or the victim finished them itself.
      vacuous.push(
        `${f.kind} ${f.host}: none of its ${f.inFlight.length} op(s) in flight was taken over (${f.endedBeforeFault.length} ended before the fault, ${f.finishedByVictim.length} finished by the victim)` +
          (f.endedBeforeFault.length > 0 ? '; a longer --op-ms makes ops outlast its onset' : ''),
      );
    }
  }
  if (load.opsRefused > 0) {
    problems.push(`${load.opsRefused} container op submission(s) refused by the API`);
  }
  for (const e of load.errors) problems.push(`load: ${e}`);
  // Capacity: a last direct sample, then the Placement API's view.
  await capacity.sample();
  const readFailures = [...capacity.failures];
  if (capacity.samples === 0) vacuous.push('capacity was never sampled');
  const overCapacity = new Map(capacity.over);
  try {
    const read = options.apiRead ?? ((r) => r());
    await read(() => overCapacityThroughApi(api, overCapacity));
  } catch (error) {
    readFailures.push(
      `verdict read failed: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  for (const line of overCapacity.values()) problems.push(line);
  for (const line of readFailures) problems.push(line);
  for (const line of vacuous) problems.push(`vacuous: ${line}`);
  const states = await state.flowStates();
  const halfDone = [...states].filter(([s]) => !ENDED.has(s)).reduce((n, [, c]) => n + c, 0);
  if (halfDone) {
    const named = (await state.halfDoneFlows()).join('; ');
    problems.push(`flows not ended: ${JSON.stringify(Object.fromEntries(states))}: ${named}`);
  }
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
    doubleApplied,
    orderViolations: orderViolations(load, accepted, problems),
    overCapacity: overCapacity.size,
    capacitySamples: capacity.samples,
    staleEffectsRefused: refused.length,
    tasksRunTwice: twice.length,
    readFailures: readFailures.length,
    submissionsRefused: load.opsRefused,
    loadErrors: load.errors.length,
    vacuous,
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
    v.tasksRunTwice === 0 &&
    v.readFailures === 0 &&
    v.submissionsRefused === 0 &&
    v.loadErrors === 0 &&
    v.vacuous.length === 0 &&
    v.problems.length === 0
  );
}
