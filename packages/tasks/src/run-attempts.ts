import type { JsonObject } from '@rigging/core';
import { TasksError } from './errors.js';
import { SETTLED, type LogEntry } from './log.js';
import { failureOf, isThenable, RunJournal, whyNotJson, type FlowRetry } from './run-journal.js';

/**
 * @internal Running one task: its attempts (RUNNING, execute, SUCCESS or FAILURE), its retry
 * controller's decisions, and the enclosing flow whose controller retries it, if any.
 */
export class RunAttempts extends RunJournal {
  /**
   * Runs atom `index`. The hot path — RUNNING, a synchronous JSON result, SUCCESS, on a log whose
   * writes are already durable when `append` returns (the memory log) — is synchronous: no
   * promise, await or closure per task, which is what keeps the cost per task flat as runs grow.
   * Anything else (a pending write, a promise from the task, a failure, a result to check
   * further) continues asynchronously.
   */
  protected runAtom(index: number): boolean | Promise<boolean> {
    const task = this.compiled.atoms[index]!.task;
    const attempt = this.attempts[index]! + 1;
    this.attempts[index] = attempt;
    const params = this.paramsOf(index, task.retry?.paramsFor?.(attempt));
    const running = this.entryOf(index, 'RUNNING', false, undefined, undefined);
    const written = this.write(running);
    if (written !== SETTLED) return this.#runAfter(written, index, running, attempt, params);
    this.applied(index, running, false, undefined);
    return this.#executeAtom(index, attempt, params);
  }

  async #runAfter(
    written: Promise<void>,
    index: number,
    running: LogEntry,
    attempt: number,
    params: JsonObject | undefined,
  ): Promise<boolean> {
    await written;
    this.applied(index, running, false, undefined);
    return this.#executeAtom(index, attempt, params);
  }

  /** First attempt of atom `index` (RUNNING is durable). */
  #executeAtom(
    index: number,
    attempt: number,
    params: JsonObject | undefined,
  ): boolean | Promise<boolean> {
    const task = this.compiled.atoms[index]!.task;
    let result: unknown;
    try {
      result = task.execute(
        this.taskContext(index, this.controller.signal, params),
        this.inputsFor(index, params),
      );
    } catch (error) {
      return this.#attemptLoop(index, attempt, params, { threw: true, value: error });
    }
    if (result === undefined) result = null;
    if (isThenable(result) || Array.isArray(task.provides) || whyNotJson(result) !== undefined) {
      return this.#attemptLoop(index, attempt, params, { threw: false, value: result });
    }
    this.bind(index, result);
    const success = this.entryOf(index, 'SUCCESS', true, result, undefined);
    const written = this.write(success);
    if (written !== SETTLED) return this.#succeededAfter(written, index, success, result);
    this.#succeeded(index, success, result);
    return true;
  }

  async #succeededAfter(
    written: Promise<void>,
    index: number,
    success: LogEntry,
    result: unknown,
  ): Promise<boolean> {
    await written;
    this.#succeeded(index, success, result);
    return true;
  }

  #succeeded(index: number, success: LogEntry, result: unknown): void {
    this.applied(index, success, true, result);
    this.completedAt[index] = ++this.completedCount;
  }

  /** Attempts of atom `index` from the outcome of its first `execute` call (retries included). */
  async #attemptLoop(
    index: number,
    attempt: number,
    params: JsonObject | undefined,
    first: { threw: boolean; value: unknown } | undefined,
  ): Promise<boolean> {
    const atom = this.compiled.atoms[index]!;
    const task = atom.task;
    const signal = this.controller.signal;
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
            this.taskContext(index, signal, params),
            this.inputsFor(index, params),
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
          this.bind(index, result);
          const success = this.entryOf(index, 'SUCCESS', true, result, undefined);
          await this.write(success);
          this.applied(index, success, true, result);
          this.completedAt[index] = ++this.completedCount;
          return true;
        }
        const failure = failureOf(atom.name, bad);
        await this.transition(index, 'FAILURE', { failure });
        this.failures.push(failure);
        return false;
      }
      const failure = failureOf(atom.name, error);
      if (signal.aborted) {
        await this.transition(index, 'CANCELLED', { failure });
        return false;
      }
      const decision = task.retry
        ? task.retry.onFailure({ task: atom.name, attempt, error })
        : { action: 'revert' as const };
      if (decision.action === 'retry' && this.stopReason === undefined) {
        await this.transition(index, 'RETRYING', { failure });
        try {
          if (decision.delayMs) await this.clock.sleep(decision.delayMs, { signal });
        } catch (thrown) {
          await this.transition(index, 'CANCELLED', { failure: failureOf(atom.name, thrown) });
          return false;
        }
        attempt = this.attempts[index] = attempt + 1;
        params = this.paramsOf(index, decision.params ?? task.retry?.paramsFor?.(attempt));
        await this.transition(index, 'RUNNING');
        continue;
      }
      const scope = decision.action === 'revertAll' ? undefined : this.#flowRetryFor(index, error);
      if (scope && this.flowRetry === undefined) {
        // The task will run again with its flow: RETRYING (not FAILURE), so a resume re-runs it.
        // The flow's failed attempt is logged with it, atomically: a resume continues the count.
        await this.transition(index, 'RETRYING', { failure }, [
          {
            seq: 0,
            task: scope.name,
            subflow: true,
            state: 'RETRYING',
            attempt: scope.attempt,
            failure,
            at: 0,
            token: this.token,
          },
        ]);
        this.flowRetry = { ...scope, failure };
        return false;
      }
      await this.transition(index, 'FAILURE', { failure });
      this.failures.push(failure);
      return false;
    }
  }

  /** The innermost enclosing flow whose retry controller retries, if any (counting its attempt). */
  #flowRetryFor(index: number, error: unknown): Omit<FlowRetry, 'failure'> | undefined {
    const atom = this.compiled.atoms[index]!;
    for (let level = atom.path.length - 1; level >= 0; level--) {
      const scope = this.compiled.scopes.get(atom.path[level]!);
      if (!scope) continue;
      const attempt = (this.flowAttempts.get(scope.name) ?? 0) + 1;
      const decision = scope.retry.onFailure({ task: scope.name, attempt, error });
      if (decision.action === 'revertAll') return undefined;
      if (decision.action === 'revert') continue;
      // Tasks outside the flow that already used its results would make reverting it unsound.
      for (let member = scope.lo; member < scope.hi; member++) {
        for (const successor of this.compiled.atoms[member]!.succs) {
          if (
            (successor < scope.lo || successor >= scope.hi) &&
            this.states[successor] !== 'PENDING'
          )
            return undefined;
        }
      }
      this.flowAttempts.set(scope.name, attempt);
      return {
        name: scope.name,
        lo: scope.lo,
        hi: scope.hi,
        attempt,
        delayMs: decision.delayMs ?? 0,
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
  const why = whyNotJson(result);
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
