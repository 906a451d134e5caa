import type { Json } from '@rigging/core';
import type { TaskFailure } from './errors.js';
import { MinHeap } from './min-heap.js';
import { pump } from './pump.js';
import type { RunContext } from './run-context.js';
import { taskContext } from './run-attempts.js';
import { failureOf, type RunJournal } from './run-journal.js';
import type { FlowRetry, RunState } from './run-state.js';
import { REDACTED, reveal } from './secrets.js';

/**
 * @internal Reverting: the whole flow once it failed, or one sub-flow before its controller runs
 * it again. Reads the run's state; changes it only through the journal (and `state.fail` /
 * `state.failed` for what is not logged).
 *
 * Order: a completed task is reverted only once every completed task that depends on it has been
 * reverted (reverse topological order), at most `concurrency` at once; among the tasks that may
 * start, the one that completed last starts first. With `concurrency: 1` this is exactly the
 * reverse order of completion (the task that completed last always has no completed dependents
 * left); with more, independent branches are reverted in parallel, so two unrelated tasks may be
 * reverted in either order or at the same time.
 */
export class Reverter {
  readonly #context: RunContext;
  readonly #state: RunState;
  readonly #journal: RunJournal;
  /** Aborts when the lease is lost (running reverts see it). */
  readonly #revertSignal: AbortSignal;
  /** Aborts when the run is cancelled (cuts a sub-flow's retry delay short). */
  readonly #forwardSignal: AbortSignal;

  constructor(
    context: RunContext,
    state: RunState,
    journal: RunJournal,
    signals: { forward: AbortSignal; revert: AbortSignal },
  ) {
    this.#context = context;
    this.#state = state;
    this.#journal = journal;
    this.#forwardSignal = signals.forward;
    this.#revertSignal = signals.revert;
  }

  /** Reverts every completed task (and those whose revert was interrupted), in the order above. */
  async revertAll(): Promise<void> {
    const { atoms, order } = this.#context.compiled;
    const state = this.#state;
    const todo = (index: number) => {
      const s = state.state(index);
      return s === 'SUCCESS' || s === 'REVERTING' || s === 'REVERT_FAILURE';
    };
    const pending = new Int32Array(atoms.length);
    const ready = new MinHeap((index) => -state.completedAt(index));
    for (const atom of atoms) {
      if (!todo(atom.index)) continue;
      let count = 0;
      for (const successor of atom.succs) if (todo(successor)) count++;
      pending[atom.index] = count;
      if (count === 0) ready.push(atom.index);
    }
    const tolerant = this.#context.onRevertFailure === 'tolerant';
    let failed = false;
    await pump(this.#context.concurrency, {
      fail: (error) => state.fail(error),
      next: () =>
        ready.size > 0 &&
        (state.stopReason === undefined || state.stopReason === 'cancel') &&
        state.fatal === undefined &&
        (tolerant || !failed)
          ? ready.pop()
          : -1,
      start: (index) => this.#revert(index, state.cause),
      flush: () => this.#journal.flush(),
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
      for (const index of order)
        if (state.state(index) === 'SUCCESS')
          state.revertEnded({ task: atoms[index]!.name, state: 'PENDING' });
    }
  }

  /** Reverts atom `index` for `cause`: REVERTING, its `revert`, then REVERTED or REVERT_FAILURE. */
  async #revert(index: number, cause: TaskFailure | undefined): Promise<boolean> {
    const state = this.#state;
    const atom = this.#context.compiled.atoms[index]!;
    const task = atom.task;
    if (task.revert) {
      await this.#journal.task(index, 'REVERTING');
      try {
        const stored = reveal(state.result(index) as Json, this.#context.key);
        const params = state.paramsOf(index, task.retry?.paramsFor?.(state.attempt(index)));
        await task.revert(taskContext(this.#context, state, index, this.#revertSignal, params), {
          result: stored.ok ? stored.value : REDACTED,
          failure: cause,
          inputs: state.inputsFor(index, params),
        });
      } catch (error) {
        await this.#journal.task(index, 'REVERT_FAILURE', failureOf(atom.name, error));
        return false;
      }
    }
    this.#journal.reverted(index);
    return true;
  }

  /**
   * Before sub-flow `retry.name` runs again: reverts its completed tasks (reverse completion
   * order, one at a time), makes every task of it PENDING again, waits its delay, and logs its
   * next attempt. A failed revert instead makes the flow revert as a whole.
   */
  async retryFlow(retry: FlowRetry): Promise<void> {
    const state = this.#state;
    const done: number[] = [];
    for (let member = retry.lo; member < retry.hi; member++) {
      const s = state.state(member);
      if (s === 'SUCCESS' || s === 'REVERTING') done.push(member);
    }
    done.sort((x, y) => state.completedAt(y) - state.completedAt(x));
    for (const member of done) {
      if (!(await this.#revert(member, retry.failure))) {
        state.failed(retry.failure);
        return;
      }
    }
    this.#context.logger.debug({ flowId: this.#context.flowId, flow: retry.name }, 'retrying flow');
    // A new attempt of the flow gives each task a fresh count (and its controller its whole
    // budget and first parameter set): PENDING is logged with attempt 0.
    for (let member = retry.lo; member < retry.hi; member++)
      if (state.state(member) !== 'PENDING') await this.#journal.task(member, 'PENDING');
    if (retry.delayMs) {
      try {
        await this.#journal.flush();
        await this.#context.clock.sleep(retry.delayMs, { signal: this.#forwardSignal });
      } catch {
        // Cancelled while waiting: the forward loop sees the stop.
        return;
      }
    }
    await this.#journal.flowAttemptStarted(retry.name, retry.attempt + 1);
  }
}
