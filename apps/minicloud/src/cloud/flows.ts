import type { LogEntry } from '@rigging/tasks';

/** One task transition as a deployment reports it (live, from the durable task log). */
export interface TaskUpdate {
  task: string;
  state: LogEntry['state'];
  attempt: number;
  at: number;
  failure?: { message: string } | undefined;
  result?: unknown;
}

/** What a deployment's log says, independent of which process ran it. */
export interface FlowOutcome {
  ok: boolean;
  retried: Record<string, number>;
  failure: { task: string | null; message: string } | null;
  reverted: string[];
  vms: Record<string, string>;
}

/** Reads a deployment's outcome off its task log (`engine.history(flowId)`). */
export function outcomeOf(entries: readonly LogEntry[]): FlowOutcome {
  const retried: Record<string, number> = {};
  const reverted: string[] = [];
  const vms: Record<string, string> = {};
  let failure: FlowOutcome['failure'] = null;
  let final: string | undefined;
  for (const e of entries) {
    if (e.task === null) {
      final = e.state;
      continue;
    }
    if (e.subflow) continue; // a sub-flow's own retry entries, not a task's
    if (e.state === 'RETRYING') retried[e.task] = (e.attempt ?? 1) + 1;
    if (e.state === 'REVERTED') reverted.push(e.task);
    if (e.state === 'FAILURE' && !failure)
      failure = { task: e.task, message: e.failure?.message ?? 'failed' };
    if (e.state === 'SUCCESS' && e.task.startsWith('vm-')) {
      vms[e.task] = (e.result as { gpu?: string } | undefined)?.gpu ?? 'none';
    }
  }
  const ok = final === 'SUCCESS';
  return { ok, retried, failure: ok ? null : failure, reverted: ok ? [] : reverted, vms };
}
