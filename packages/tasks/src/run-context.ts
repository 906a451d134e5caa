import type { Clock, Lease, Logger, TypedEmitter } from '@rigging/core';
import type { EngineEvents } from './events.js';
import type { CompiledFlow } from './flow.js';
import type { TaskLog } from './log.js';
import type { TaskLease } from './task.js';

/**
 * @internal Everything a flow run gets from its engine at construction: the engine's settings
 * and collaborators, and the flow, id, lease and signal of this run.
 */
export interface RunContext {
  readonly log: TaskLog;
  /** Tasks run (and are reverted) in parallel up to this many. */
  readonly concurrency: number;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly onRevertFailure: 'stop' | 'tolerant';
  /** The secret key sensitive values are encrypted with (redacted without one). */
  readonly key: Uint8Array | undefined;
  /** Where `task:state` and `flow:state` are emitted (the engine). */
  readonly events: TypedEmitter<EngineEvents>;
  readonly compiled: CompiledFlow;
  readonly flowId: string;
  readonly lease: Lease | undefined;
  /** The read-only view of `lease` that task contexts expose. */
  readonly taskLease?: TaskLease | undefined;
  readonly signal: AbortSignal | undefined;
  /** Symbols whose values are never stored in clear. */
  readonly symbols: ReadonlySet<string>;
}
