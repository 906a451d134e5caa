export { createQueue } from './queue.js';
export type { Queue, QueueOptions } from './queue.js';
export { memoryBackend } from './memory.js';
export type { MemoryBackendOptions } from './memory.js';
export { handlerError, QueueError } from './errors.js';
export type { QueueErrorCode } from './errors.js';
export type {
  QueueBackend,
  BackendContext,
  Claim,
  ClaimOptions,
  Completion,
  EnqueueInput,
  FailOutcome,
  ReleaseOptions,
} from './backend.js';
export type {
  BackoffOptions,
  CommonQueueOptions,
  GetOptions,
  Handler,
  HandlerContext,
  Handlers,
  HandlersOf,
  KeyInfo,
  KeyStatus,
  OpInfo,
  OpInput,
  OpStatus,
  OpTypes,
  ProducerQueueOptions,
  Policy,
  PolicyOptions,
  QueueEvents,
  ResultOf,
  RetentionOptions,
} from './types.js';
