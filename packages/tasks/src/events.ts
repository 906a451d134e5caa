import type { TaskFailure } from './errors.js';
import type { FlowState, TaskState } from './log.js';

/** Payload of `task:state`. */
export interface TaskStateEvent {
  /** The flow run's id. */
  flowId: string;
  /** The flow's name. */
  flow: string;
  /** The task's name. */
  task: string;
  /** The state the task entered. */
  state: TaskState;
  /** The attempt, from 1. */
  attempt: number;
  /** The result (on SUCCESS; `'[redacted]'` for sensitive tasks). */
  result?: unknown;
  /** The error (on FAILURE, RETRYING, CANCELLED and REVERT_FAILURE). */
  failure?: TaskFailure;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Payload of `flow:state`. */
export interface FlowStateEvent {
  /** The flow run's id. */
  flowId: string;
  /** The flow's name. */
  flow: string;
  /** The state the flow entered. */
  state: FlowState;
  /** The failure that caused the rollback (on REVERTING, REVERT_FAILURE, REVERTED, CANCELLED). */
  failure?: TaskFailure;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Events of an {@link Engine}. */
export interface EngineEvents {
  /** Every task transition, after it is durable in the log. */
  'task:state': TaskStateEvent;
  /** Every flow transition, after it is durable in the log. */
  'flow:state': FlowStateEvent;
}
