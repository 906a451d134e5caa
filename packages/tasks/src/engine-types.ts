import type { Lease, Listener } from '@rigging/core';
import type { EngineEvents } from './events.js';
import type { Flow } from './flow.js';
import type { FlowDefinition, TaskLog } from './log.js';
import type { Task } from './task.js';

// The engine's option and hook types, and the engine as its helpers (runOrResume, recovery,
// flowHandler) use it: a module that imports none of them, so the Engine class can import the
// helpers and the helpers need not import the class.

/** Options of {@link Engine.run}. */
export interface RunOptions<I> {
  /** The flow's inputs: every symbol its tasks require that no task provides (JSON values). */
  inputs: I;
  /** @default a random UUID */
  flowId?: string;
  /** Cancels the flow: running tasks see `ctx.signal` abort, then completed tasks are reverted. */
  signal?: AbortSignal;
  /**
   * Runs the flow under this lease, held by the caller (e.g. a queue's claim on the op:
   * `ctx.lease`), instead of the engine's own lock on the flow: its token fences every write of
   * the flow, `lease.lost` stops the run at the next task boundary as a lost lock does, and the
   * engine neither acquires nor releases anything (no lock writes). Run a given flow always under
   * leases of one source: their tokens are compared.
   */
  lease?: Lease;
}

/** What a {@link MigrateHook} returns. */
export interface MigrateDecision {
  /** Old task name → new task name. */
  rename?: Record<string, string>;
  /** Accept the remaining differences (added tasks run; removed ones are ignored; versions accepted). */
  accept?: boolean;
}

/** Maps a log written by an older flow definition onto the current one. */
export type MigrateHook = (
  stored: FlowDefinition,
  current: FlowDefinition,
) => MigrateDecision | undefined;

/** Options of {@link Engine.resume}. */
export interface ResumeOptions {
  /**
   * Inputs merged over the stored ones, key by key: a key given here replaces the stored value
   * (e.g. a redacted sensitive input supplied again), a key left out keeps it. Tasks that already
   * completed are not re-run, whatever the inputs.
   */
  inputs?: Record<string, unknown>;
  /** Cancels the flow: running tasks see `ctx.signal` abort, then completed tasks are reverted. */
  signal?: AbortSignal;
  /** Maps a log written by an older flow definition onto the current one; without it any difference fails with `tasks.incompatible_log`. */
  migrate?: MigrateHook;
  /**
   * Runs the flow under this lease, held by the caller (e.g. a queue's claim on the op:
   * `ctx.lease`), instead of the engine's own lock on the flow: its token fences every write of
   * the flow, `lease.lost` stops the run at the next task boundary as a lost lock does, and the
   * engine neither acquires nor releases anything (no lock writes). Run a given flow always under
   * leases of one source: their tokens are compared.
   */
  lease?: Lease;
}

/** Differences found between a stored flow definition and the current one. */
export interface Incompatibility {
  /** Tasks in the current definition that the stored one lacks. */
  added: string[];
  /** Tasks in the stored definition (after renames) that the current one lacks. */
  removed: string[];
  /** Tasks that now come before a task they came after in the stored definition. */
  reordered: string[];
  /** Tasks whose major version (the part before the first dot) changed. */
  versions: {
    /** The task's name. */
    task: string;
    /** The stored version. */
    from: string;
    /** The current version. */
    to: string;
  }[];
}

/** Options of {@link Engine.runOrResume}. */
export interface RunOrResumeOptions<I> {
  /** The flow's id: the same id always names the same piece of work (e.g. a queue op's id). */
  flowId: string;
  /**
   * The flow's inputs. A new flow starts with them; an existing one is resumed with them merged
   * over its stored inputs (which supplies redacted sensitive inputs again).
   */
  inputs: I;
  /**
   * Stops without undoing anything: ends the waiting, and asks a running flow to suspend at the
   * next task boundary (it then throws `tasks.suspended` and can be resumed later). Never reverts.
   */
  signal?: AbortSignal;
  /** Cancels the flow as `run({ signal })` does: running tasks see their signal abort, then completed tasks are reverted. */
  cancel?: AbortSignal;
  /** Passed on to `resume` (a log written by an older definition); without it any difference fails with `tasks.incompatible_log`. */
  migrate?: MigrateHook;
  /** Passed on to `run` and `resume`: the flow runs under this caller-held lease, not the engine's lock. */
  lease?: Lease;
  /** Pause between two tries while the flow is busy elsewhere or the connection is lost. @default 250 */
  pollMs?: number;
  /** Stop waiting after this long and throw the last `tasks.flow_busy` (or connection) error. @default no limit */
  timeoutMs?: number;
  /**
   * The flow probably exists already (a re-delivered message, a retried request): resume it
   * first, and run it only when the log does not have it. Without it a new flow runs at once and
   * an existing one is found when the run writes first — after the first task's `execute` when
   * that task is transactional (its transaction rolls back, but what `execute` did before it ran
   * once more). @default false
   */
  resumeFirst?: boolean;
}

/**
 * What {@link flowHandler}, `runOrResume` and recovery need of an engine: an {@link Engine}
 * (typed by its members, so these helpers and the class import one way).
 */
export interface FlowEngine {
  /** The engine's task log. */
  readonly log: TaskLog;
  /** Ids of the flows this engine is running now. */
  readonly running: string[];
  /** See {@link Engine.run}. */
  run<I, O>(flow: Flow<I, O> | Task<I, O>, options: RunOptions<I>): Promise<O>;
  /** See {@link Engine.resume}. */
  resume<I, O>(flowId: string, flow: Flow<I, O> | Task<I, O>, options?: ResumeOptions): Promise<O>;
  /** See {@link Engine.runOrResume}. */
  runOrResume<I, O>(flow: Flow<I, O> | Task<I, O>, options: RunOrResumeOptions<I>): Promise<O>;
  /** See {@link Engine.suspend}. */
  suspend(flowId: string): Promise<boolean>;
  /** Subscribes to an engine event; returns the unsubscribe function. */
  on<K extends keyof EngineEvents>(event: K, listener: Listener<EngineEvents[K]>): () => void;
}
