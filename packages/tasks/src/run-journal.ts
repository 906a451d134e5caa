import {
  deferred,
  explainNotJson,
  serializeError,
  silentLogger,
  type Clock,
  type Json,
  type JsonObject,
  type Lease,
  type Logger,
} from '@rigging/core';
import { TasksError, type RevertOutcome, type TaskFailure } from './errors.js';
import type { FlowStateEvent, TaskStateEvent } from './events.js';
import type { CompiledFlow } from './flow.js';
import type { FlowState, LogEntry, TaskState } from './log.js';
import type { RunContext } from './run-context.js';
import { protect, REDACTED } from './secrets.js';
import type { Task, TaskContext } from './task.js';

/** @internal Why a run stops at the next task boundary. */
export type StopReason = 'suspend' | 'lost' | 'cancel';

/** @internal A sub-flow about to be retried: its atoms are `lo`..`hi - 1`; `attempt` is the one that failed. */
export interface FlowRetry {
  name: string;
  lo: number;
  hi: number;
  attempt: number;
  delayMs: number;
  failure: TaskFailure;
}

function isSensitiveResult(
  task: Task,
  atomProvides: string[],
  symbols: ReadonlySet<string>,
): boolean {
  if (task.sensitive === true) return true;
  for (const symbol of atomProvides) if (symbols.has(symbol)) return true;
  return false;
}

const NO_EXTRA: { result?: unknown; failure?: TaskFailure } = Object.freeze({});

/** @internal `explainNotJson`, without its allocations for the common scalar results. */
export function whyNotJson(value: unknown): string | undefined {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return undefined;
  if (typeof value === 'number' && Number.isFinite(value)) return undefined;
  return explainNotJson(value, 'result');
}

/** @internal Whether `value` is a promise (or any thenable). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** @internal The failure record of `error` thrown by `task` (null: the flow itself). */
export function failureOf(task: string | null, error: unknown): TaskFailure {
  return { ...serializeError(error), task };
}

/**
 * @internal The state of one flow run and its writes: every transition is appended to the log
 * (durable before the run moves on), then applied to the state and emitted as an event. The
 * attempt, revert and run-loop layers build on it.
 */
export class RunJournal {
  /** The flow's id in the log. */
  readonly flowId: string;
  /** What the engine gave this run. */
  protected readonly context: RunContext;
  protected readonly compiled: CompiledFlow;
  /** Sequence number of the last log entry written (or restored). */
  seq = 0;
  /** The flow's inputs (revealed on resume). */
  inputs: Record<string, unknown> = {};
  /** Resolves once the run returned or threw. */
  readonly settled: Promise<void>;
  protected readonly settle: () => void;
  protected readonly lease: Lease | undefined;
  protected readonly token: bigint | null;
  /** The `update` of every task-level append (never mutated by logs). */
  protected readonly tokenOnly: { token: bigint | null };
  protected readonly logger: Logger;
  protected readonly clock: Clock;
  protected readonly symbols: ReadonlySet<string>;
  protected readonly states: TaskState[];
  protected readonly attempts: Int32Array;
  protected readonly values = new Map<string, unknown>();
  /** Stored (possibly protected) results of completed atoms. */
  protected readonly results: unknown[];
  protected readonly completedAt: Float64Array;
  protected completedCount = 0;
  protected readonly failures: TaskFailure[] = [];
  protected readonly reverts = new Map<string, RevertOutcome>();
  protected cause: TaskFailure | undefined;
  protected phase: 'forward' | 'revert' = 'forward';
  /** Why the run stops at the next task boundary, if it does. */
  protected stopReason: StopReason | undefined;
  protected fatal: unknown;
  protected readonly controller = new AbortController();
  protected readonly revertController = new AbortController();
  protected readonly signal: AbortSignal | undefined;
  protected unavailable = new Set<string>();
  protected flowRetry: FlowRetry | undefined;
  /** Failed attempts of each sub-flow with a retry controller (restored from the log). */
  protected readonly flowAttempts = new Map<string, number>();
  /** The attempt each such sub-flow is running (1 until it is retried). */
  protected readonly flowCurrent = new Map<string, number>();
  /** Restored: a sub-flow whose retry was logged but whose next attempt had not started. */
  protected pendingFlowRetry: { name: string; failure: TaskFailure } | undefined;

  constructor(context: RunContext) {
    this.context = context;
    this.compiled = context.compiled;
    this.flowId = context.flowId;
    this.lease = context.lease;
    this.token = context.lease?.token ?? null;
    this.tokenOnly = { token: this.token };
    this.logger = context.logger;
    this.clock = context.clock;
    this.symbols = context.symbols;
    const count = context.compiled.atoms.length;
    this.states = new Array<TaskState>(count).fill('PENDING');
    this.attempts = new Int32Array(count);
    this.results = new Array<unknown>(count);
    this.completedAt = new Float64Array(count);
    this.signal = context.signal;
    const settled = deferred<void>();
    this.settled = settled.promise;
    this.settle = () => settled.resolve();
  }

  /** Records how a task's revert ended (latest last). */
  protected outcome(outcome: RevertOutcome): void {
    this.reverts.delete(outcome.task);
    this.reverts.set(outcome.task, outcome);
  }

  /** The symbols provided so far. */
  protected outputs(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [symbol, value] of this.values) out[symbol] = value;
    return out;
  }

  protected bind(index: number, value: unknown): void {
    const atom = this.compiled.atoms[index]!;
    const provides = atom.task.provides;
    if (provides === undefined) return;
    if (typeof provides === 'string') this.values.set(provides, value);
    else
      for (const symbol of provides)
        this.values.set(symbol, (value as Record<string, unknown>)[symbol]);
  }

  protected inputsFor(index: number, params: JsonObject | undefined): Record<string, unknown> {
    const atom = this.compiled.atoms[index]!;
    const requires = atom.task.requires;
    const inputs: Record<string, unknown> = {};
    for (let position = 0; position < requires.length; position++) {
      const symbol = requires[position]!;
      inputs[symbol] =
        atom.sources[position] === -1 ? this.inputs[symbol] : this.values.get(symbol);
    }
    if (params) Object.assign(inputs, params);
    return inputs;
  }

  /** Parameters of atom `index`: those of its enclosing flows' controllers for their current attempts, then its own. */
  protected paramsOf(index: number, own: JsonObject | undefined): JsonObject | undefined {
    if (this.compiled.scopes.size === 0) return own;
    let out: JsonObject | undefined;
    for (const name of this.compiled.atoms[index]!.path) {
      const scope = this.compiled.scopes.get(name);
      const params = scope?.retry.paramsFor?.(this.flowCurrent.get(name) ?? 1);
      if (params) out = { ...out, ...params };
    }
    return out === undefined ? own : own === undefined ? out : { ...out, ...own };
  }

  /** One entry, made durable (the update objects are built once per run: no allocation per write). */
  protected write(entry: LogEntry, flowState?: FlowState): Promise<void> {
    return this.context.log.append(
      this.flowId,
      [entry],
      flowState ? { state: flowState, token: this.token } : this.tokenOnly,
    );
  }

  protected async flowState(state: FlowState, failure?: TaskFailure): Promise<void> {
    const at = this.clock.now();
    const entry: LogEntry = { seq: ++this.seq, task: null, state, at, token: this.token };
    if (failure) entry.failure = failure;
    await this.write(entry, state);
    this.emitFlow(state, at, failure);
  }

  emitFlow(state: FlowState, at: number, failure?: TaskFailure): void {
    if (!this.context.events.hasListeners('flow:state')) return;
    const e: FlowStateEvent = { flowId: this.flowId, flow: this.compiled.root.name, state, at };
    if (failure) e.failure = failure;
    this.context.events.emit('flow:state', e);
  }

  protected async transition(
    index: number,
    state: TaskState,
    extra: { result?: unknown; failure?: TaskFailure } = NO_EXTRA,
    also?: LogEntry[],
  ): Promise<void> {
    const has = 'result' in extra;
    const entry = this.entryOf(index, state, has, extra.result, extra.failure);
    if (also) {
      for (const laterEntry of also) {
        laterEntry.seq = ++this.seq;
        laterEntry.at = entry.at;
      }
      await this.context.log.append(this.flowId, [entry, ...also], this.tokenOnly);
    } else await this.write(entry);
    this.applied(index, entry, has, extra.result);
  }

  /** The log entry of a task transition (a SUCCESS result is kept for reverting). */
  protected entryOf(
    index: number,
    state: TaskState,
    hasResult: boolean,
    result: unknown,
    failure: TaskFailure | undefined,
  ): LogEntry {
    const atom = this.compiled.atoms[index]!;
    const entry: LogEntry = {
      seq: ++this.seq,
      task: atom.name,
      state,
      attempt: this.attempts[index]!,
      at: this.clock.now(),
      token: this.token,
    };
    if (hasResult) {
      const stored = isSensitiveResult(atom.task, atom.provides, this.symbols)
        ? protect(result, this.context.key)
        : ((result ?? null) as Json);
      entry.result = stored;
      if (state === 'SUCCESS') this.results[index] = stored;
    }
    if (failure) entry.failure = failure;
    return entry;
  }

  /** Once `entry` is durable: the task's state moves and `task:state` is emitted. */
  protected applied(index: number, entry: LogEntry, hasResult: boolean, result: unknown): void {
    this.states[index] = entry.state;
    if (!this.context.events.hasListeners('task:state')) return;
    const atom = this.compiled.atoms[index]!;
    const event: TaskStateEvent = {
      flowId: this.flowId,
      flow: this.compiled.root.name,
      task: atom.name,
      state: entry.state,
      attempt: entry.attempt!,
      at: entry.at,
    };
    if (hasResult)
      event.result = isSensitiveResult(atom.task, atom.provides, this.symbols) ? REDACTED : result;
    if (entry.failure) event.failure = entry.failure;
    this.context.events.emit('task:state', event);
  }

  protected taskContext(
    index: number,
    signal: AbortSignal,
    params: JsonObject | undefined,
  ): TaskContext {
    const atom = this.compiled.atoms[index]!;
    return {
      signal,
      logger:
        this.logger === silentLogger
          ? silentLogger
          : this.logger.child({ flowId: this.flowId, task: atom.name }),
      flowId: this.flowId,
      task: atom.name,
      attempt: this.attempts[index]!,
      params,
      lease: this.context.taskLease,
    };
  }

  /** Logs SUSPENDED and throws `tasks.suspended` (the flow resumes later). */
  protected async suspended(): Promise<never> {
    await this.flowState('SUSPENDED');
    throw new TasksError(
      'tasks.suspended',
      `flow ${this.flowId} suspended; resume it with engine.resume()`,
      {
        details: { flowId: this.flowId },
      },
    );
  }
}
