import { readFile } from 'node:fs/promises';
import type { Network } from './netns.js';
import { startProcess, type HostProcess, type ProcessOptions } from './processes.js';
import type { ClusterState } from './state.js';

/** The faults a run injects, in order. */
export type FaultKind = 'partition' | 'kill' | 'stop';

/** What one fault did and what followed. */
export interface FaultRecord {
  kind: FaultKind;
  host: string;
  pid: number;
  /** Epoch ms the fault began and ended (heal, restart, SIGCONT). */
  at: number;
  endedAt: number;
  /** Container ops the victim had started and not applied when the fault began. */
  inFlight: string[];
  /** Per in-flight op: ms from the fault until another process started it. */
  takeoverMs: number[];
  /** In-flight ops that finished before the fault bit (seen running just before it). */
  endedBeforeFault: string[];
  /**
   * In-flight ops the victim finished itself when it came back, nobody having claimed them in
   * the meantime (its late completion was then still valid). Never after a `kill`.
   */
  finishedByVictim: string[];
  /** In-flight ops nobody else started within the wait and that did not finish. */
  notTakenOver: string[];
  /** Lines of the victim's log refusing a write made with a lost lease or stale token. */
  staleRefusals: string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The longest a victim stays partitioned or stopped while its ops in flight are not taken over. */
const HOLD_MS = 60_000;

/** Log lines that show a write refused because its lease was lost or its token was stale. */
const STALE =
  /tasks\.fenced|tasks\.ownership_lost|async-queue\.lease_lost|claim is stale|fencing token/;

/**
 * Injects the faults one after the other on the worker processes, each on a worker that has
 * container ops in flight (taking turns): `partition` (link down for `2 × leaseMs + 8 s`, then healed),
 * `kill` (SIGKILL, then a new worker on the same host once its work was taken over), `stop`
 * (SIGSTOP for `2 × leaseMs + 3 s`, then SIGCONT). A partitioned or stopped victim stays so, past
 * that time, until each of its ops in flight was taken over (at most {@link HOLD_MS} in all): on
 * a loaded machine the others may need longer to look, and a victim back too early would finish
 * its ops itself, leaving the takeover unproven. Records takeover times and the victim's refused
 * stale writes. `workers` is updated in place when a killed worker is replaced.
 */
export async function injectFaults(options: {
  kinds: readonly FaultKind[];
  workers: HostProcess[];
  network: Network;
  state: ClusterState;
  processOptions: ProcessOptions;
  leaseMs: number;
  say(line: string): void;
}): Promise<FaultRecord[]> {
  const { workers, network, state, leaseMs, say } = options;
  const records: FaultRecord[] = [];
  for (const [i, kind] of options.kinds.entries()) {
    // The victim: the first worker (from this fault's turn on) with container ops in flight.
    let slot = i % workers.length;
    let inFlight: string[] = [];
    for (let waited = 0; waited < 30_000 && inFlight.length === 0; waited += 100) {
      for (let k = 0; k < workers.length && inFlight.length === 0; k++) {
        slot = (i + k) % workers.length;
        inFlight = await state.inFlight([workers[slot]!.pid]);
      }
      if (inFlight.length === 0) await sleep(100);
    }
    const victim = workers[slot]!;
    const at = Date.now();
    say(
      `fault ${i + 1}: ${kind} ${victim.host.label} (pid ${victim.pid}) with ${inFlight.length} container op(s) in flight`,
    );
    // Until each op in flight was taken over, or HOLD_MS from the fault.
    const held = () => takeovers(state, inFlight, victim.pid, at, at + HOLD_MS - Date.now());
    if (kind === 'partition') {
      await network.partition(victim.host);
      await sleep(2 * leaseMs + 8_000);
      await held();
      await network.heal(victim.host);
      say(`  ${victim.host.label} healed after ${Date.now() - at} ms`);
    } else if (kind === 'stop') {
      victim.child.kill('SIGSTOP');
      await sleep(2 * leaseMs + 3_000);
      await held();
      victim.child.kill('SIGCONT');
      say(`  ${victim.host.label} resumed (SIGCONT) after ${Date.now() - at} ms`);
    } else {
      victim.child.kill('SIGKILL');
      await victim.exited;
    }
    const takeover = await takeovers(state, inFlight, victim.pid, at, 60_000);
    if (kind === 'kill') {
      const replacement = await startProcess(victim.host, 'worker', options.processOptions);
      workers[slot] = replacement;
      say(`  ${victim.host.label}: new worker pid ${replacement.pid}`);
    }
    // Give the victim time to notice and log its refused writes before reading its log.
    await sleep(kind === 'kill' ? 0 : 3_000);
    const record: FaultRecord = {
      kind,
      host: victim.host.label,
      pid: victim.pid,
      at,
      endedAt: Date.now(),
      inFlight,
      takeoverMs: takeover.ms,
      endedBeforeFault: takeover.endedBefore,
      finishedByVictim: takeover.finished,
      notTakenOver: takeover.missing,
      staleRefusals: kind === 'kill' ? [] : await staleLines(victim.logFile, at),
    };
    say(
      `  ${takeover.ms.length}/${inFlight.length} in-flight op(s) taken over` +
        (takeover.endedBefore.length
          ? `, ${takeover.endedBefore.length} ended before the fault`
          : '') +
        (takeover.finished.length
          ? `, ${takeover.finished.length} finished by ${victim.host.label} itself`
          : '') +
        (takeover.ms.length ? ` (max ${Math.max(...takeover.ms)} ms)` : '') +
        (kind === 'kill' ? '' : `; ${record.staleRefusals.length} stale write(s) refused`),
    );
    records.push(record);
  }
  return records;
}

/**
 * For each op, ms from `since` until a process other than `victim` started it; ops that ended
 * without that are listed apart: before `since`, or after it (the victim finished them once back).
 */
async function takeovers(
  state: ClusterState,
  ops: readonly string[],
  victim: number,
  since: number,
  waitMs: number,
): Promise<{ ms: number[]; endedBefore: string[]; finished: string[]; missing: string[] }> {
  const pending = new Set(ops);
  const ms: number[] = [];
  const deadline = Date.now() + waitMs;
  const finished: string[] = [];
  const endedBefore: string[] = [];
  while (pending.size > 0 && Date.now() < deadline) {
    for (const [ref, at] of await state.startedByOthers([...pending], victim, since)) {
      pending.delete(ref);
      ms.push(at - since);
    }
    for (const [id, op] of await state.ops([...pending])) {
      if (op.status === 'succeeded' || op.status === 'failed') {
        pending.delete(id);
        (op.finishedAt !== undefined && op.finishedAt < since ? endedBefore : finished).push(id);
      }
    }
    if (pending.size > 0) await sleep(250);
  }
  return { ms, endedBefore, finished, missing: [...pending] };
}

/** The victim's log lines after `since` that show a stale write refused. */
async function staleLines(file: string, since: number): Promise<string[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.split('\n').filter((line) => {
    if (!STALE.test(line)) return false;
    const time = /"time":(\d+)/.exec(line);
    return !time || Number(time[1]) >= since;
  });
}
