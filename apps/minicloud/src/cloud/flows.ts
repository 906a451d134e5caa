import { RiggingError, sleep, type SerializedError } from '@rigging/core';
import { isConnectionError } from '@rigging/sql';
import type { Engine, Flow, LogEntry } from '@rigging/tasks';
import { MinicloudError } from '../errors.js';

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

/**
 * The error a flow op failed with, as the caller should see it: a queue `op_failed` carries the
 * handler's error (local) or its serialized form (another process); user-facing codes come back
 * as the same RiggingError code and message, so `minicloud.env_exists` stays a 409 and a CLI
 * one-liner whichever process ran the op.
 */
export function unwrapOpError(error: unknown): unknown {
  if (!RiggingError.hasCode(error, 'async-queue.op_failed')) return error;
  const cause = error.cause as (Error & { code?: unknown }) | SerializedError | undefined;
  if (!cause) return error;
  if (RiggingError.isInstance(cause)) return cause;
  if (typeof cause.code === 'string') {
    return cause.code.startsWith('minicloud.')
      ? new MinicloudError(cause.code as `minicloud.${string}`, cause.message)
      : new RiggingError(cause.code, cause.message);
  }
  return error;
}

/**
 * Runs a flow, or resumes it when an earlier owner (a worker that died, was cut off or paused
 * past its lease) left it in the task log: completed tasks do not run again. Waits instead of
 * failing while another process holds the flow's lock (`tasks.flow_busy`: a dead owner's lock
 * not expired yet, or a paused one that still holds its database session) or created the flow
 * between our read and our run (`tasks.flow_exists`), and after a lost database connection
 * (resumed from the log on a new one). `signal` (the queue's claim) ends the waiting.
 * @returns what `run`/`resume` resolve with.
 */
export async function runOrResume<R>(
  engine: Engine,
  flowId: string,
  flow: Flow<any, any>,
  inputs: Record<string, unknown>,
  signal: AbortSignal,
  pollMs = 250,
): Promise<R> {
  for (;;) {
    try {
      if (await engine.log.load(flowId)) return (await engine.resume(flowId, flow)) as R;
      return (await engine.run(flow, { flowId, inputs })) as R;
    } catch (error) {
      const retry =
        RiggingError.hasCode(error, 'tasks.flow_busy') ||
        RiggingError.hasCode(error, 'tasks.flow_exists') ||
        isConnectionError(error);
      if (!retry || signal.aborted) throw error;
      await sleep(pollMs, { signal });
    }
  }
}
