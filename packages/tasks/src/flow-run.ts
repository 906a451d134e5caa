import { deferred, serializeError, type JsonObject } from '@rigging/core';
import { FlowFailed, TasksError } from './errors.js';
import type { FlowDefinition, FlowState, LogEntry } from './log.js';
import type { RunContext } from './run-context.js';
import { TaskAttempts } from './run-attempts.js';
import { runForward } from './run-forward.js';
import { RunJournal } from './run-journal.js';
import { Reverter } from './run-revert.js';
import { RunState, type StopReason } from './run-state.js';

/**
 * @internal One flow run by an engine: the run loop (forward in dependency order, then revert on
 * failure), restoring from a log, and stopping (suspension, cancellation, lost ownership).
 *
 * It composes the run's parts, each given what it needs: the {@link RunState}, the
 * {@link RunJournal} that alone writes the state's logged transitions, the {@link TaskAttempts}
 * that run one task, the {@link Reverter}, and the forward scheduler ({@link runForward}).
 */
export class FlowRun {
  /** The flow's id in the log. */
  readonly flowId: string;
  /** Resolves once the run returned or threw. */
  readonly settled: Promise<void>;
  readonly #settle: () => void;
  readonly #context: RunContext;
  readonly #state: RunState;
  readonly #journal: RunJournal;
  readonly #attempts: TaskAttempts;
  readonly #reverter: Reverter;
  /** Aborts running tasks when the run is cancelled. */
  readonly #forward = new AbortController();
  /** Aborts running reverts when the lease is lost. */
  readonly #revert = new AbortController();

  /** The caller's signal aborted: cancel (running tasks see their signal abort), then revert. */
  readonly #onAbort = () => {
    this.#state.cancel();
    this.#forward.abort(this.#context.signal?.reason);
  };
  /** The lease was lost: stop at the next task boundary; running reverts see their signal abort. */
  readonly #onLost = () => {
    this.#state.lose();
    this.#revert.abort(this.#context.lease?.lost.reason);
  };

  /** A run of `context.compiled` with `inputs` (as given to `run`, or as restored for `resume`). */
  constructor(context: RunContext, inputs: Readonly<Record<string, unknown>>) {
    this.#context = context;
    this.flowId = context.flowId;
    this.#state = new RunState(context.compiled, inputs);
    this.#journal = new RunJournal(context, this.#state);
    this.#attempts = new TaskAttempts(context, this.#state, this.#journal, this.#forward.signal);
    this.#reverter = new Reverter(context, this.#state, this.#journal, {
      forward: this.#forward.signal,
      revert: this.#revert.signal,
    });
    const settled = deferred<void>();
    this.settled = settled.promise;
    this.#settle = () => settled.resolve();
  }

  /** Asks the run to stop at the next task boundary (the first reason given wins). */
  stop(reason: StopReason): void {
    this.#state.stop(reason);
  }

  /** A new flow: recorded in the log with its first write (then {@link execute} runs it). */
  create(definition: FlowDefinition, storedInputs: JsonObject): void {
    this.#journal.create(definition, storedInputs);
  }

  /** Folds a stored log into the run's state. */
  restore(entries: LogEntry[], rename: Map<string, string>): void {
    this.#journal.restore(entries, rename);
  }

  /** Continues a restored run. */
  async continue(stored: FlowState): Promise<unknown> {
    const state = this.#state;
    try {
      if (stored === 'SUCCESS') return state.outputs();
      if (stored === 'REVERTED' || stored === 'CANCELLED') {
        const code = stored === 'CANCELLED' ? 'tasks.cancelled' : 'tasks.flow_failed';
        throw new FlowFailed(code, this.flowId, this.#failures(), state.reverts());
      }
      if (state.phase === 'forward') {
        this.#checkAvailable();
        if (state.failures.length && state.some('FAILURE')) {
          await this.#journal.flow('REVERTING', state.failures[0]);
        } else {
          this.#requestRestoredRetry();
          await this.#journal.flow('RUNNING');
        }
      } else {
        await this.#journal.flow('REVERTING', state.cause);
      }
      return await this.execute();
    } finally {
      this.#settle();
    }
  }

  /** Nothing left to run may read a value that was stored redacted and not given again. */
  #checkAvailable(): void {
    const state = this.#state;
    for (const atom of this.#context.compiled.atoms) {
      if (state.state(atom.index) === 'SUCCESS') continue;
      const requires = atom.task.requires;
      for (let position = 0; position < requires.length; position++) {
        const symbol = requires[position]!;
        if (
          state.unavailable(symbol) ||
          (!(symbol in state.inputs) && atom.sources[position] === -1)
        ) {
          throw new TasksError(
            'tasks.sensitive_unavailable',
            `cannot resume flow ${this.flowId}: task '${atom.name}' needs '${symbol}', which was not stored in clear; give the engine the secretKey or pass it in resume(…, { inputs })`,
            { details: { flowId: this.flowId, task: atom.name, symbol: symbol } },
          );
        }
      }
    }
  }

  /** Killed between logging a sub-flow's retry and starting its next attempt: finish the retry. */
  #requestRestoredRetry(): void {
    const state = this.#state;
    const pending = state.pendingFlowRetry;
    if (!pending) return;
    const scope = this.#context.compiled.scopes.get(pending.name)!;
    const attempt = state.flowAttempts(scope.name) || 1;
    const decision = scope.retry.onFailure({ task: scope.name, attempt, error: pending.failure });
    state.requestFlowRetry({
      name: scope.name,
      lo: scope.lo,
      hi: scope.hi,
      attempt,
      delayMs: decision.action === 'retry' ? (decision.delayMs ?? 0) : 0,
      failure: pending.failure,
    });
  }

  /** Runs the forward phase (if still in it), then reverts on failure. */
  async execute(): Promise<unknown> {
    const { signal, lease } = this.#context;
    const state = this.#state;
    const journal = this.#journal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    lease?.lost.addEventListener('abort', this.#onLost, { once: true });
    if (signal?.aborted) this.#onAbort();
    if (lease?.lost.aborted) this.#onLost();
    try {
      if (state.phase === 'forward') {
        await runForward(this.#context, state, journal, this.#attempts, this.#reverter);
        if (journal.finished) {
          // The flow's SUCCESS committed with its last task's transaction: it is done, whatever
          // was asked of the run since.
          await journal.flow('SUCCESS');
          return state.outputs();
        }
        await this.#suspendOrThrowIfStopped();
        if (state.failures.length === 0 && state.stopReason !== 'cancel') {
          await journal.flow('SUCCESS');
          return state.outputs();
        }
        const cause =
          state.stopReason === 'cancel'
            ? { ...serializeError(signal?.reason ?? new Error('cancelled')), task: null }
            : state.failures[0];
        await journal.flow('REVERTING', cause);
      }
      const cancelled =
        state.stopReason === 'cancel' || (state.cause !== undefined && state.cause.task === null);
      state.cancelHandled(); // reverting goes on after a cancellation
      await this.#reverter.revertAll();
      await this.#suspendOrThrowIfStopped();
      const failures = this.#failures();
      const reverts = state.reverts();
      if (state.some('REVERT_FAILURE')) {
        await journal.flow('REVERT_FAILURE', state.cause);
        throw new FlowFailed('tasks.revert_failed', this.flowId, failures, reverts);
      }
      await journal.flow(cancelled ? 'CANCELLED' : 'REVERTED', state.cause);
      throw new FlowFailed(
        cancelled ? 'tasks.cancelled' : 'tasks.flow_failed',
        this.flowId,
        failures,
        reverts,
      );
    } finally {
      signal?.removeEventListener('abort', this.#onAbort);
      lease?.lost.removeEventListener('abort', this.#onLost);
      this.#settle();
    }
  }

  /** The failures the flow failed for (or its cause, e.g. a cancellation). */
  #failures() {
    const state = this.#state;
    return state.failures.length ? [...state.failures] : state.cause ? [state.cause] : [];
  }

  /** After a phase: throws a fatal error or the lost lease; logs SUSPENDED and throws `tasks.suspended`. */
  async #suspendOrThrowIfStopped(): Promise<void> {
    const state = this.#state;
    if (state.fatal !== undefined) {
      if (state.stopReason === 'lost') throw this.#lostError(state.fatal);
      throw state.fatal;
    }
    if (state.stopReason === 'lost') {
      // What completed is recorded if the log still takes this owner's writes.
      try {
        await this.#journal.flush();
      } catch (error) {
        throw this.#lostError(error);
      }
      throw this.#lostError();
    }
    if (state.stopReason === 'suspend') {
      await this.#journal.flow('SUSPENDED');
      throw new TasksError(
        'tasks.suspended',
        `flow ${this.flowId} suspended; resume it with engine.resume()`,
        { details: { flowId: this.flowId } },
      );
    }
  }

  #lostError(cause?: unknown): TasksError {
    return new TasksError(
      'tasks.ownership_lost',
      `flow ${this.flowId} stopped: this engine lost its lease; whoever acquires it next can resume the flow`,
      { cause: cause ?? this.#context.lease?.lost.reason, details: { flowId: this.flowId } },
    );
  }
}
