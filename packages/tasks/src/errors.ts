import { RiggingError, type Json, type SerializedError } from '@rigging/core';

/** Every error code of @rigging/tasks. */
export type TasksErrorCode =
  | 'tasks.invalid_flow'
  | 'tasks.result_not_serializable'
  | 'tasks.flow_failed'
  | 'tasks.revert_failed'
  | 'tasks.cancelled'
  | 'tasks.suspended'
  | 'tasks.ownership_lost'
  | 'tasks.flow_busy'
  | 'tasks.fenced'
  | 'tasks.flow_exists'
  | 'tasks.flow_not_found'
  | 'tasks.incompatible_log'
  | 'tasks.sensitive_unavailable'
  | 'tasks.transaction_unsupported'
  | 'tasks.log_corrupt';

/** An error of @rigging/tasks (see {@link TasksErrorCode}). */
export class TasksError extends RiggingError<TasksErrorCode> {
  override readonly name: string = 'TasksError';
}

/** A failure as stored in the log and handed to `revert`: the serialized error plus the task. */
export interface TaskFailure extends SerializedError {
  /** The task that failed (or `null` for a flow-level cause such as cancellation). */
  task: string | null;
  /** The error's JSON `details` (set by every `RiggingError` that has some), when present. */
  details?: Json;
}

/** The outcome of reverting one task after a failure. */
export interface RevertOutcome {
  /** The task's name. */
  task: string;
  /** `REVERTED`, `REVERT_FAILURE`, or `PENDING` when a revert failure stopped the rollback before this task. */
  state: 'REVERTED' | 'REVERT_FAILURE' | 'PENDING';
  /** Why the revert failed (on `REVERT_FAILURE`). */
  failure?: TaskFailure;
}

/**
 * Thrown by `engine.run` / `engine.resume` when a flow failed. Every completed task was reverted
 * (code `tasks.flow_failed`, or `tasks.cancelled` after cancellation) unless a revert failed
 * (code `tasks.revert_failed`; see `reverts`).
 */
export class FlowFailed extends TasksError {
  override readonly name: string = 'FlowFailed';
  /** The id of the flow run that failed. */
  readonly flowId: string;
  /** The failures that caused the rollback (the first one first). */
  readonly failures: TaskFailure[];
  /** One outcome per task that had to be reverted, in the order reverts happened. */
  readonly reverts: RevertOutcome[];

  constructor(
    code: 'tasks.flow_failed' | 'tasks.revert_failed' | 'tasks.cancelled',
    flowId: string,
    failures: TaskFailure[],
    reverts: RevertOutcome[],
    cause?: unknown,
  ) {
    const first = failures[0];
    const what = first
      ? `${first.task ? `task '${first.task}'` : 'flow'} failed: ${first.message}`
      : 'failed';
    const revertFailed = reverts.filter((r) => r.state === 'REVERT_FAILURE');
    const tail =
      code === 'tasks.revert_failed'
        ? `; reverting failed for ${revertFailed.map((r) => `'${r.task}'`).join(', ')}`
        : `; ${reverts.length} completed task(s) reverted`;
    super(code, `flow ${flowId} ${what}${tail}`, {
      cause,
      details: { flowId, failures, reverts } as unknown as Json,
    });
    this.flowId = flowId;
    this.failures = failures;
    this.reverts = reverts;
  }
}
