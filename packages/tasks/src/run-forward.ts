import { MinHeap } from './min-heap.js';
import { pump } from './pump.js';
import type { RunContext } from './run-context.js';
import type { TaskAttempts } from './run-attempts.js';
import type { RunJournal } from './run-journal.js';
import type { Reverter } from './run-revert.js';
import type { RunState } from './run-state.js';

/**
 * @internal The forward scheduler: runs every task not yet completed, in dependency order
 * (definition order among the ready ones), `concurrency` at a time, until all completed, one
 * failed, or the run was asked to stop. When a failed task asked for its sub-flow to run again,
 * it lets what runs finish, has the reverter prepare the retry, and starts over.
 */
export async function runForward(
  context: RunContext,
  state: RunState,
  journal: RunJournal,
  attempts: TaskAttempts,
  reverter: Reverter,
): Promise<void> {
  const { atoms, rank } = context.compiled;
  const waiting = new Int32Array(atoms.length);
  let ready = new MinHeap((index) => rank[index]!);
  const plan = () => {
    ready = new MinHeap((index) => rank[index]!);
    for (const atom of atoms) {
      if (state.state(atom.index) === 'SUCCESS') continue;
      let count = 0;
      for (const predecessor of atom.preds) if (state.state(predecessor) !== 'SUCCESS') count++;
      waiting[atom.index] = count;
      if (count === 0) ready.push(atom.index);
    }
  };
  plan();
  await pump(context.concurrency, {
    fail: (error) => state.fail(error),
    next: () =>
      ready.size > 0 &&
      state.stopReason === undefined &&
      state.failures.length === 0 &&
      state.fatal === undefined &&
      state.flowRetry === undefined
        ? ready.pop()
        : -1,
    start: (index) => attempts.run(index),
    flush: () => journal.flush(),
    done: (index, ok) => {
      if (!ok) return;
      for (const successor of atoms[index]!.succs) {
        if (--waiting[successor]! === 0) ready.push(successor);
      }
    },
    idle: async () => {
      if (state.flowRetry === undefined || state.fatal !== undefined) return false;
      const retry = state.takeFlowRetry()!;
      if (state.stopReason !== undefined || state.failures.length > 0) {
        if (state.stopReason === undefined) state.failed(retry.failure);
        return false;
      }
      await reverter.retryFlow(retry);
      plan();
      return true;
    },
  });
}
