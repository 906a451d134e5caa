import type { TaskFailure } from './errors.js';
import type { FlowState, TaskState } from './log.js';

/** Payload of `task:state`. */
export interface TaskStateEvent {
  flowId: string;
  /** The flow's name. */
  flow: string;
  task: string;
  state: TaskState;
  attempt: number;
  /** The result (on SUCCESS; `'[redacted]'` for sensitive tasks). */
  result?: unknown;
  failure?: TaskFailure;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Payload of `flow:state`. */
export interface FlowStateEvent {
  flowId: string;
  flow: string;
  state: FlowState;
  failure?: TaskFailure;
  at: number;
}

/** Events of an {@link Engine}. */
export interface EngineEvents {
  /** Every task transition, after it is durable in the log. */
  'task:state': TaskStateEvent;
  /** Every flow transition, after it is durable in the log. */
  'flow:state': FlowStateEvent;
}
