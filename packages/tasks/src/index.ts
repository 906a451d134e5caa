export { task } from './task.js';
export type { Task, TaskSpec, TaskContext, TaskLease, RevertArgs, Provides } from './task.js';
export { linearFlow, unorderedFlow, graphFlow, link, validateFlow } from './flow.js';
export type { Flow, FlowOptions, Link, Node, FlowOf, InputsOf, OutputsOf } from './flow.js';
export { Engine } from './engine.js';
export type {
  EngineOptions,
  EngineEvents,
  TaskStateEvent,
  FlowStateEvent,
  RunOptions,
  ResumeOptions,
  MigrateHook,
  MigrateDecision,
  Incompatibility,
  RunOrResumeOptions,
  FlowEngine,
} from './engine.js';
export { flowHandler, resumableReason } from './flow-handler.js';
export { Recovery } from './recovery.js';
export type {
  RecoveryOptions,
  RecoveryEvents,
  RecoveryResumingEvent,
  RecoveryFinishedEvent,
  RecoveryRefusedEvent,
  RecoveryErrorEvent,
} from './recovery.js';
export type { FlowHandlerContext, FlowHandlerOptions, FlowQueueHandler } from './flow-handler.js';
export { times, alternatives, revertAll } from './retry.js';
export type { RetryController, RetryDecision, RetryContext, Backoff } from './retry.js';
export { memoryLog, taskStates } from './log.js';
export type {
  TaskLog,
  TaskState,
  FlowState,
  FlowRecord,
  FlowDefinition,
  LogEntry,
  FlowSummary,
  TransactionWrite,
} from './log.js';
export { TasksError, FlowFailed } from './errors.js';
export type { TasksErrorCode, TaskFailure, RevertOutcome } from './errors.js';
export { timingListener, otelListener } from './listeners.js';
export type { TimingListener, TaskTiming, OtelListenerOptions } from './listeners.js';
export { REDACTED } from './secrets.js';
