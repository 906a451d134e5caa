import { explainNotJson, silentLogger, type JsonObject } from '@rigging/core';
import { TasksError } from './errors.js';
import { SETTLED } from './log.js';
import type { RunContext } from './run-context.js';
import { failureOf, isThenable, type RunJournal } from './run-journal.js';
import type { FlowRetry, RunState } from './run-state.js';
import type { TaskContext } from './task.js';

/** @internal The context a task's `execute` or `revert` receives. */
export function taskContext(
  context: RunContext,
  state: RunState,
  index: number,
  signal: AbortSignal,
  params: JsonObject | undefined,
  transaction?: TaskContext['transaction'],
): TaskContext {
  const name = context.compiled.atoms[index]!.name;
  return {
    signal,
    logger:
      context.logger === silentLogger
        ? silentLogger
        : context.logger.child({ flowId: context.flowId, task: name }),
    flowId: context.flowId,
    task: name,
    attempt: state.attempt(index),
    params,
    lease: context.taskLease,
    transaction,
  };
}

/**
 * @internal Runs one task: its attempts (RUNNING, execute, SUCCESS or FAILURE) and its retry
 * controller's decisions; when the task's own controller gives up, asks the innermost enclosing
 * flow with a retry controller whether the flow runs again. Reads the run's state; changes it
 * only through the journal.
 */
export class TaskAttempts {
  readonly #context: RunContext;
  readonly #state: RunState;
  readonly #journal: RunJournal;
  /** Aborts when the run is cancelled (running tasks see it). */
  readonly #signal: AbortSignal;

  constructor(context: RunContext, state: RunState, journal: RunJournal, signal: AbortSignal) {
    this.#context = context;
    this.#state = state;
    this.#journal = journal;
    this.#signal = signal;
  }

  /**
   * Runs atom `index`; true when it completed. The hot path — RUNNING, a synchronous JSON result,
   * SUCCESS, on a log whose writes are already durable when `append` returns (the memory log) —
   * is synchronous: no promise, await or closure per task, which is what keeps the cost per task
   * flat as runs grow. Anything else (a pending write, a promise from the task, a failure, a
   * result to check further) continues asynchronously.
   */
  run(index: number): boolean | Promise<boolean> {
    if (this.#context.compiled.atoms[index]!.task.transaction) return this.#inTransaction(index);
    const written = this.#journal.running(index);
    if (written !== SETTLED) return this.#executeAfter(written, index);
    if (this.#state.stopReason !== undefined) return this.#notStarted(index);
    return this.#execute(index);
  }

  async #executeAfter(written: Promise<void>, index: number): Promise<boolean> {
    await written;
    if (this.#state.stopReason !== undefined) return this.#notStarted(index);
    return this.#execute(index);
  }

  /**
   * The run was asked to stop while RUNNING was written (e.g. by a listener of the previous
   * task's SUCCESS, which is durable in the same write): the task is not executed.
   */
  #notStarted(index: number): false {
    this.#journal.notStarted(index);
    return false;
  }

  /** The first attempt's `execute` (RUNNING is durable). */
  #execute(index: number): boolean | Promise<boolean> {
    const task = this.#context.compiled.atoms[index]!.task;
    const params = this.#state.paramsOf(index, task.retry?.paramsFor?.(this.#state.attempt(index)));
    let result: unknown;
    try {
      result = task.execute(
        taskContext(this.#context, this.#state, index, this.#signal, params),
        this.#state.inputsFor(index, params),
      );
    } catch (error) {
      return this.#attempts(index, params, { threw: true, value: error });
    }
    if (result === undefined) result = null;
    if (
      isThenable(result) ||
      Array.isArray(task.provides) ||
      explainNotJson(result, 'result') !== undefined
    ) {
      return this.#attempts(index, params, { threw: false, value: result });
    }
    this.#journal.succeeded(index, result);
    return true;
  }

  /** Attempts of atom `index` from the outcome of its first `execute` call (retries included). */
  async #attempts(
    index: number,
    params: JsonObject | undefined,
    first: { threw: boolean; value: unknown } | undefined,
  ): Promise<boolean> {
    const state = this.#state;
    const journal = this.#journal;
    const atom = this.#context.compiled.atoms[index]!;
    const task = atom.task;
    const signal = this.#signal;
    for (;;) {
      let result: unknown;
      let error: unknown;
      let ok = false;
      try {
        if (first) {
          const { threw, value } = first;
          first = undefined;
          if (threw) throw value;
          result = value;
        } else
          result = task.execute(
            taskContext(this.#context, state, index, signal, params),
            state.inputsFor(index, params),
          );
        if (isThenable(result)) result = await result;
        ok = true;
      } catch (thrown) {
        error = thrown;
      }
      if (ok) {
        if (result === undefined) result = null;
        const bad = resultProblem(atom.name, task.provides, result);
        if (!bad) {
          journal.succeeded(index, result);
          return true;
        }
        await journal.task(index, 'FAILURE', failureOf(atom.name, bad));
        return false;
      }
      const next = await this.#failed(index, error, false);
      if (next === false) return false;
      params = next;
    }
  }

  /**
   * Attempts of atom `index`, a task defined with `transaction: true`: `execute` runs with
   * `ctx.transaction(work)`, which runs `work` in a transaction of the log committed with the
   * task's SUCCESS (see {@link RunJournal.committed}); when `execute` returns without calling it,
   * the SUCCESS commits alone. A failure of the task (its error, or a result that cannot be
   * stored) goes the way of any task's; a failure of the log's (a lost connection, fenced, a
   * commit refused) stops the run: nothing of the attempt was written, so a resume runs it again.
   */
  async #inTransaction(index: number): Promise<boolean> {
    const state = this.#state;
    const journal = this.#journal;
    const atom = this.#context.compiled.atoms[index]!;
    const task = atom.task;
    const log = this.#context.log;
    await journal.transactionStarting(index);
    if (state.stopReason !== undefined) {
      journal.transactionNotStarted(index);
      return false;
    }
    let params = state.paramsOf(index, task.retry?.paramsFor?.(state.attempt(index)));
    for (;;) {
      /** What the attempt's transaction did: not begun, committed, or failed (the log's failure or not). */
      const done: { outcome: 'none' | 'committed' | { logError: unknown } } = { outcome: 'none' };
      /** A result the log cannot store: the task fails without a retry. */
      let badResult: Error | undefined;
      const commit = async (work: (transaction: unknown) => unknown): Promise<unknown> => {
        if (done.outcome !== 'none') {
          throw new TypeError(
            `task '${atom.name}': ctx.transaction may be called once per attempt`,
          );
        }
        let taskError: { error: unknown } | undefined;
        let result: unknown;
        try {
          await journal.committed(index, async (transaction) => {
            taskError = undefined;
            try {
              result = await work(transaction);
            } catch (error) {
              taskError = { error };
              throw error;
            }
            if (result === undefined) result = null;
            const bad = resultProblem(atom.name, task.provides, result);
            if (bad) {
              badResult = bad;
              taskError = { error: bad };
              throw bad;
            }
            return result;
          });
        } catch (error) {
          if (taskError === undefined || taskError.error !== error)
            done.outcome = { logError: error };
          throw error;
        }
        done.outcome = 'committed';
        return result;
      };
      let failure: unknown;
      try {
        const value = await task.execute(
          taskContext(
            this.#context,
            state,
            index,
            this.#signal,
            params,
            commit as TaskContext['transaction'],
          ),
          state.inputsFor(index, params),
        );
        if (done.outcome === 'none') await commit(() => value);
        return true;
      } catch (error) {
        const { outcome } = done;
        if (outcome === 'committed') {
          // Its SUCCESS is durable: the task is done, whatever it did after.
          this.#context.logger.warn(
            { err: error, flowId: this.#context.flowId, task: atom.name },
            'task threw after its transaction committed; it stays done',
          );
          return true;
        }
        if (typeof outcome === 'object' && outcome.logError === error) throw error; // the log's
        if (log.isConnectionLoss?.(error)) throw error;
        if (badResult !== undefined && badResult === error) {
          await journal.task(index, 'FAILURE', failureOf(atom.name, error));
          return false;
        }
        failure = error;
      }
      const next = await this.#failed(index, failure, true);
      if (next === false) return false;
      params = next;
    }
  }

  /**
   * Atom `index`'s attempt threw `error`: CANCELLED when the run was cancelled, else what its retry
   * controller (or an enclosing flow's) decides. Resolves with the next attempt's params when the
   * task runs again (its next attempt started), `false` when it does not. A retry decided while
   * the run stops (suspended, lease lost) is logged RETRYING and left to the resume, which starts
   * the next attempt: the stop reverts nothing and spends no attempt.
   */
  async #failed(
    index: number,
    error: unknown,
    transactional: boolean,
  ): Promise<JsonObject | undefined | false> {
    const state = this.#state;
    const journal = this.#journal;
    const signal = this.#signal;
    const atom = this.#context.compiled.atoms[index]!;
    const task = atom.task;
    const failure = failureOf(atom.name, error);
    if (signal.aborted) {
      await journal.task(index, 'CANCELLED', failure);
      return false;
    }
    const attempt = state.attempt(index);
    const decision = task.retry
      ? task.retry.onFailure({ task: atom.name, attempt, error })
      : { action: 'revert' as const };
    if (decision.action === 'retry') {
      await journal.task(index, 'RETRYING', failure);
      // Stopping (suspended, lease lost): no attempt starts now; a resume starts the next one.
      if (state.stopReason !== undefined) return false;
      try {
        if (decision.delayMs) await this.#context.clock.sleep(decision.delayMs, { signal });
      } catch (thrown) {
        await journal.task(index, 'CANCELLED', failureOf(atom.name, thrown));
        return false;
      }
      const written = transactional ? journal.transactionStarting(index) : journal.running(index);
      const params = state.paramsOf(
        index,
        decision.params ?? task.retry?.paramsFor?.(state.attempt(index)),
      );
      await written;
      return params;
    }
    const pending = state.flowRetry;
    if (decision.action !== 'revertAll' && pending && index >= pending.lo && index < pending.hi) {
      // Another task of this sub-flow's attempt failed first: the attempt runs again as a whole.
      await journal.task(index, 'RETRYING', failure);
      return false;
    }
    const retry =
      decision.action === 'revertAll' || pending !== undefined
        ? undefined
        : this.#flowRetryFor(index, error, failure);
    if (retry) {
      await journal.flowRetrying(index, retry);
      return false;
    }
    await journal.task(index, 'FAILURE', failure);
    return false;
  }

  /** The innermost enclosing flow whose retry controller retries, if any (with its failed attempt's number). */
  #flowRetryFor(
    index: number,
    error: unknown,
    failure: FlowRetry['failure'],
  ): FlowRetry | undefined {
    const { atoms, scopes } = this.#context.compiled;
    const atom = atoms[index]!;
    for (let level = atom.path.length - 1; level >= 0; level--) {
      const scope = scopes.get(atom.path[level]!);
      if (!scope) continue;
      const attempt = this.#state.flowAttempts(scope.name) + 1;
      const decision = scope.retry.onFailure({ task: scope.name, attempt, error });
      if (decision.action === 'revertAll') return undefined;
      if (decision.action === 'revert') continue;
      // Tasks outside the flow that already used its results would make reverting it unsound.
      for (let member = scope.lo; member < scope.hi; member++) {
        for (const successor of atoms[member]!.succs) {
          if (
            (successor < scope.lo || successor >= scope.hi) &&
            this.#state.state(successor) !== 'PENDING'
          )
            return undefined;
        }
      }
      return {
        name: scope.name,
        lo: scope.lo,
        hi: scope.hi,
        attempt,
        delayMs: decision.delayMs ?? 0,
        failure,
      };
    }
    return undefined;
  }
}

/** Why a task's result cannot be stored (not JSON, or not the object its `provides` list needs). */
function resultProblem(
  name: string,
  provides: string | readonly string[] | undefined,
  result: unknown,
): Error | undefined {
  const why = explainNotJson(result, 'result');
  if (why) {
    return new TasksError(
      'tasks.result_not_serializable',
      `task '${name}' returned a value that is not JSON: ${why}`,
      { details: { task: name, reason: why } },
    );
  }
  if (Array.isArray(provides) && (typeof result !== 'object' || result === null)) {
    return new TypeError(
      `task '${name}' provides ${JSON.stringify(provides)} but returned ${JSON.stringify(result)}, not an object`,
    );
  }
  return undefined;
}
