import type { Json } from '@rigging/core';
import type { TaskFailure } from './errors.js';
import { MinHeap } from './min-heap.js';
import { pump } from './pump.js';
import { RunAttempts } from './run-attempts.js';
import { failureOf, type FlowRetry } from './run-journal.js';
import { REDACTED, reveal } from './secrets.js';

/**
 * @internal Reverting: the whole flow (completed tasks in reverse order of completion, reverse
 * topological order with concurrency) or one sub-flow before its controller retries it.
 */
export class RunRevert extends RunAttempts {
  /** Reverts every completed task: reverse order of completion (reverse topological with concurrency). */
  protected async revertAll(): Promise<void> {
    const { atoms } = this.compiled;
    const states = this.states;
    const completedAt = this.completedAt;
    const todo = (index: number) =>
      states[index] === 'SUCCESS' ||
      states[index] === 'REVERTING' ||
      states[index] === 'REVERT_FAILURE';
    const pending = new Int32Array(atoms.length);
    const ready = new MinHeap((index) => -completedAt[index]!);
    for (const atom of atoms) {
      if (!todo(atom.index)) continue;
      let count = 0;
      for (const successor of atom.succs) if (todo(successor)) count++;
      pending[atom.index] = count;
      if (count === 0) ready.push(atom.index);
    }
    const tolerant = this.context.onRevertFailure === 'tolerant';
    let failed = false;
    await pump(this.context.concurrency, {
      fail: (error) => {
        this.fatal ??= error;
      },
      next: () =>
        ready.size > 0 &&
        (this.stopReason === undefined || this.stopReason === 'cancel') &&
        this.fatal === undefined &&
        (tolerant || !failed)
          ? ready.pop()
          : -1,
      start: (index) => this.#revertAtom(index),
      done: (index, ok) => {
        if (!ok) failed = true;
        if (ok || tolerant) {
          for (const predecessor of atoms[index]!.preds)
            if (todo(predecessor) && --pending[predecessor]! === 0) ready.push(predecessor);
        }
      },
    });
    if (failed && !tolerant) {
      // Stopped at the first failed revert: report what is left to revert.
      for (const index of this.compiled.order)
        if (states[index] === 'SUCCESS')
          this.outcome({ task: atoms[index]!.name, state: 'PENDING' });
    }
    if (this.fatal === undefined && this.stopReason === 'suspend') await this.suspended();
  }

  async #revertAtom(index: number, cause: TaskFailure | undefined = this.cause): Promise<boolean> {
    const atom = this.compiled.atoms[index]!;
    const task = atom.task;
    if (task.revert) {
      await this.transition(index, 'REVERTING');
      try {
        const stored = reveal(this.results[index] as Json, this.context.key);
        const params = this.paramsOf(index, task.retry?.paramsFor?.(this.attempts[index]!));
        await task.revert(this.taskContext(index, this.revertController.signal, params), {
          result: stored.ok ? stored.value : REDACTED,
          failure: cause,
          inputs: this.inputsFor(index, params),
        });
      } catch (error) {
        const failure = failureOf(atom.name, error);
        await this.transition(index, 'REVERT_FAILURE', { failure });
        this.outcome({ task: atom.name, state: 'REVERT_FAILURE', failure });
        return false;
      }
    }
    await this.transition(index, 'REVERTED');
    this.outcome({ task: atom.name, state: 'REVERTED' });
    return true;
  }

  /** Reverts a flow's completed tasks (reverse completion order) and makes all its tasks PENDING again. */
  protected async retryFlow(scope: FlowRetry): Promise<void> {
    const done: number[] = [];
    for (let member = scope.lo; member < scope.hi; member++) {
      const state = this.states[member];
      if (state === 'SUCCESS' || state === 'REVERTING') done.push(member);
    }
    done.sort((x, y) => this.completedAt[y]! - this.completedAt[x]!);
    for (const member of done) {
      if (!(await this.#revertAtom(member, scope.failure))) {
        this.failures.push(scope.failure);
        return;
      }
    }
    this.logger.debug({ flowId: this.flowId, flow: scope.name }, 'retrying flow');
    for (let member = scope.lo; member < scope.hi; member++) {
      if (this.states[member] !== 'PENDING') {
        // A new attempt of the flow gives each task a fresh count (and its controller its whole
        // budget and first parameter set): PENDING is logged with attempt 0.
        this.attempts[member] = 0;
        await this.transition(member, 'PENDING');
      }
      this.completedAt[member] = 0;
    }
    if (scope.delayMs) {
      try {
        await this.clock.sleep(scope.delayMs, { signal: this.controller.signal });
      } catch {
        // Cancelled while waiting: the forward loop sees the stop.
        return;
      }
    }
    // The next attempt starts (its number is durable before any of its tasks runs).
    const next = scope.attempt + 1;
    await this.write({
      seq: ++this.seq,
      task: scope.name,
      subflow: true,
      state: 'RUNNING',
      attempt: next,
      at: this.clock.now(),
      token: this.token,
    });
    this.flowCurrent.set(scope.name, next);
  }
}
