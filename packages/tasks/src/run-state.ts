import type { JsonObject } from '@rigging/core';
import type { RevertOutcome, TaskFailure } from './errors.js';
import type { CompiledFlow } from './flow.js';
import type { TaskState } from './log.js';

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

/**
 * @internal What one flow run knows: each task's state, attempt and stored result, the symbols
 * provided so far, the failures and revert outcomes, the phase, and why it stops.
 *
 * Everything is read through getters and changed through the named transitions below, in two
 * groups. The *logged* transitions mirror log entries and are called by the run's journal
 * as it writes (or restores) the entries: a reader who wants to know how a field changes reads
 * `run-journal.ts`. Two of them also record what no entry carries, from outside the journal:
 * `failed` when a sub-flow's retry cannot go on (`run-forward.ts`, `run-revert.ts`) and
 * `revertEnded` with `PENDING` for the tasks a stopped revert leaves (`run-revert.ts`). The *stop*
 * transitions (`stop`, `cancel`, `lose`, `cancelHandled`, `fail`, `requestFlowRetry`,
 * `takeFlowRetry`) are not logged: they are how the run, its scheduler and its collaborators tell
 * each other to stop starting work.
 */
export class RunState {
  readonly compiled: CompiledFlow;
  /** The flow's inputs (as given to `run`, or revealed and merged on `resume`). */
  readonly inputs: Readonly<Record<string, unknown>>;
  readonly #states: TaskState[];
  readonly #attempts: Int32Array;
  /** Stored (possibly protected) results of completed atoms. */
  readonly #results: unknown[];
  /** Completion rank of each completed atom (1 = first), 0 when not completed. */
  readonly #completedAt: Float64Array;
  #completedCount = 0;
  readonly #values = new Map<string, unknown>();
  /** Symbols whose stored value could not be revealed on restore. */
  readonly #unavailable = new Set<string>();
  readonly #failures: TaskFailure[] = [];
  readonly #reverts = new Map<string, RevertOutcome>();
  #phase: 'forward' | 'revert' = 'forward';
  #cause: TaskFailure | undefined;
  #stopReason: StopReason | undefined;
  #fatal: unknown;
  #flowRetry: FlowRetry | undefined;
  /** Failed attempts of each sub-flow with a retry controller. */
  readonly #flowAttempts = new Map<string, number>();
  /** The attempt each such sub-flow is running (1 until it is retried). */
  readonly #flowCurrent = new Map<string, number>();
  /** Restored: a sub-flow whose retry was logged but whose next attempt had not started. */
  #pendingFlowRetry: { name: string; failure: TaskFailure } | undefined;

  constructor(compiled: CompiledFlow, inputs: Readonly<Record<string, unknown>>) {
    this.compiled = compiled;
    this.inputs = inputs;
    const count = compiled.atoms.length;
    this.#states = new Array<TaskState>(count).fill('PENDING');
    this.#attempts = new Int32Array(count);
    this.#results = new Array<unknown>(count);
    this.#completedAt = new Float64Array(count);
  }

  // ---- reads ----

  /** The state of atom `index`. */
  state(index: number): TaskState {
    return this.#states[index]!;
  }
  /** Whether some atom is in `state`. */
  some(state: TaskState): boolean {
    return this.#states.includes(state);
  }
  /** The attempt atom `index` is on (0 before its first). */
  attempt(index: number): number {
    return this.#attempts[index]!;
  }
  /** The stored (possibly protected) result of completed atom `index`. */
  result(index: number): unknown {
    return this.#results[index];
  }
  /** When atom `index` completed, as a rank (1 = first; 0 = not completed). */
  completedAt(index: number): number {
    return this.#completedAt[index]!;
  }
  /** Failures that make the flow revert, first first. */
  get failures(): readonly TaskFailure[] {
    return this.#failures;
  }
  /** How each reverted task's revert ended (latest last). */
  reverts(): RevertOutcome[] {
    return [...this.#reverts.values()];
  }
  get phase(): 'forward' | 'revert' {
    return this.#phase;
  }
  /** Why the flow reverts (the first failure, or the cancellation). */
  get cause(): TaskFailure | undefined {
    return this.#cause;
  }
  /** Why the run stops at the next task boundary, if it does. */
  get stopReason(): StopReason | undefined {
    return this.#stopReason;
  }
  /** A log write (or a start) that threw: nothing new starts, the run throws it. */
  get fatal(): unknown {
    return this.#fatal;
  }
  /** A sub-flow retry requested by a failed task, not yet taken by the scheduler. */
  get flowRetry(): FlowRetry | undefined {
    return this.#flowRetry;
  }
  /** Failed attempts of sub-flow `name` so far. */
  flowAttempts(name: string): number {
    return this.#flowAttempts.get(name) ?? 0;
  }
  /** Restored: a sub-flow retry that was logged but whose next attempt had not started. */
  get pendingFlowRetry(): { name: string; failure: TaskFailure } | undefined {
    return this.#pendingFlowRetry;
  }
  /** Whether `symbol` was stored protected and could not be revealed. */
  unavailable(symbol: string): boolean {
    return this.#unavailable.has(symbol);
  }

  /** The symbols provided so far. */
  outputs(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [symbol, value] of this.#values) out[symbol] = value;
    return out;
  }

  /** What atom `index` receives: its required symbols (from tasks or flow inputs), then `params`. */
  inputsFor(index: number, params: JsonObject | undefined): Record<string, unknown> {
    const atom = this.compiled.atoms[index]!;
    const requires = atom.task.requires;
    const inputs: Record<string, unknown> = {};
    for (let position = 0; position < requires.length; position++) {
      const symbol = requires[position]!;
      inputs[symbol] =
        atom.sources[position] === -1 ? this.inputs[symbol] : this.#values.get(symbol);
    }
    if (params) Object.assign(inputs, params);
    return inputs;
  }

  /** Parameters of atom `index`: those of its enclosing flows' controllers for their current attempts, then its own. */
  paramsOf(index: number, own: JsonObject | undefined): JsonObject | undefined {
    if (this.compiled.scopes.size === 0) return own;
    let out: JsonObject | undefined;
    for (const name of this.compiled.atoms[index]!.path) {
      const scope = this.compiled.scopes.get(name);
      const params = scope?.retry.paramsFor?.(this.#flowCurrent.get(name) ?? 1);
      if (params) out = { ...out, ...params };
    }
    return out === undefined ? own : own === undefined ? out : { ...out, ...own };
  }

  // ---- logged transitions: called by the journal (but see `failed` and `revertEnded`) ----

  /** Atom `index` starts its next attempt (the entry being written carries it); returns it. */
  nextAttempt(index: number): number {
    return ++this.#attempts[index]!;
  }
  /** Atom `index` is in `state` (its entry is durable, or restored with `attempt`). */
  entered(index: number, state: TaskState, attempt?: number): void {
    this.#states[index] = state;
    if (attempt !== undefined) this.#attempts[index] = attempt;
  }
  /**
   * Atom `index` completed with `stored` (as logged) and `value` (what its dependents receive);
   * `revealed` is false when `value` could not be recovered from `stored`.
   */
  completed(index: number, stored: unknown, value: unknown, revealed = true): void {
    this.#states[index] = 'SUCCESS';
    this.#results[index] = stored;
    this.#completedAt[index] = ++this.#completedCount;
    const atom = this.compiled.atoms[index]!;
    if (!revealed) {
      for (const symbol of atom.provides) this.#unavailable.add(symbol);
      return;
    }
    const provides = atom.task.provides;
    if (provides === undefined) return;
    if (typeof provides === 'string') this.#values.set(provides, value);
    else
      for (const symbol of provides)
        this.#values.set(symbol, (value as Record<string, unknown>)[symbol]);
  }
  /** Atom `index` runs again with a new attempt of its sub-flow: PENDING, attempt 0, not completed. */
  reset(index: number): void {
    this.#states[index] = 'PENDING';
    this.#attempts[index] = 0;
    this.#completedAt[index] = 0;
  }
  /** A failure the flow reverts for (a task's FAILURE, or a sub-flow retry that cannot go on). */
  failed(failure: TaskFailure): void {
    this.#failures.push(failure);
  }
  /** How reverting a task ended (a newer outcome replaces an older one). */
  revertEnded(outcome: RevertOutcome): void {
    this.#reverts.delete(outcome.task);
    this.#reverts.set(outcome.task, outcome);
  }
  /** The flow runs forward (RUNNING) or reverts (REVERTING, for `cause`). */
  phaseEntered(phase: 'forward' | 'revert', cause?: TaskFailure): void {
    this.#phase = phase;
    if (phase === 'revert') this.#cause = cause;
  }
  /** Attempt `attempt` of sub-flow `retry.name` failed; `retry`: it runs again (else restored, pending). */
  flowAttemptFailed(name: string, attempt: number, failure: TaskFailure, retry?: FlowRetry): void {
    this.#flowAttempts.set(name, attempt);
    if (retry) this.#flowRetry = retry;
    else this.#pendingFlowRetry = { name, failure };
  }
  /** Attempt `attempt` of sub-flow `name` starts. */
  flowAttemptStarted(name: string, attempt: number): void {
    this.#flowCurrent.set(name, attempt);
    if (this.#pendingFlowRetry?.name === name) this.#pendingFlowRetry = undefined;
  }

  // ---- stop transitions: not logged ----

  /** Stop at the next task boundary (the first reason given wins). */
  stop(reason: StopReason): void {
    this.#stopReason ??= reason;
  }
  /** The caller's signal aborted: a cancellation replaces a suspension. */
  cancel(): void {
    if (!this.#stopReason || this.#stopReason === 'suspend') this.#stopReason = 'cancel';
  }
  /** The lease was lost: this wins over any other reason. */
  lose(): void {
    this.#stopReason = 'lost';
  }
  /** A cancelled run goes on reverting: the cancellation has been handled. */
  cancelHandled(): void {
    if (this.#stopReason === 'cancel') this.#stopReason = undefined;
  }
  /** A fatal error (the first one wins). */
  fail(error: unknown): void {
    this.#fatal ??= error;
  }
  /** A sub-flow is to be retried once nothing runs (a restored retry whose next attempt had not started). */
  requestFlowRetry(retry: FlowRetry): void {
    this.#flowRetry = retry;
  }
  /** The scheduler takes the requested sub-flow retry, if any. */
  takeFlowRetry(): FlowRetry | undefined {
    const retry = this.#flowRetry;
    this.#flowRetry = undefined;
    return retry;
  }
}
