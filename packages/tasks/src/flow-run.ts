import { serializeError } from '@rigging/core';
import { FlowFailed, TasksError } from './errors.js';
import type { FlowState, LogEntry } from './log.js';
import { MinHeap } from './min-heap.js';
import { pump } from './pump.js';
import { failureOf, type StopReason } from './run-journal.js';
import { RunRevert } from './run-revert.js';
import { reveal } from './secrets.js';

/**
 * @internal One flow run by an engine: the run loop (forward in dependency order, then revert on
 * failure), restoring from a log, and stopping (suspension, cancellation, lost ownership).
 */
export class FlowRun extends RunRevert {
  /** The caller's signal aborted: cancel (running tasks see their signal abort), then revert. */
  readonly #onAbort = () => {
    if (!this.stopReason || this.stopReason === 'suspend') this.stopReason = 'cancel';
    this.controller.abort(this.signal?.reason);
  };
  /** The lease was lost: stop at the next task boundary; running reverts see their signal abort. */
  readonly #onLost = () => {
    this.stopReason = 'lost';
    this.revertController.abort(this.lease?.lost.reason);
  };

  /** Asks the run to stop at the next task boundary (the first reason given wins). */
  stop(reason: StopReason): void {
    this.stopReason ??= reason;
  }

  /** Folds a stored log into the run's state. */
  restore(entries: LogEntry[], rename: Map<string, string>): void {
    const key = this.context.key;
    for (const entry of entries) {
      if (entry.seq > this.seq) this.seq = entry.seq;
      if (entry.task === null) {
        if (entry.state === 'REVERTING') {
          this.phase = 'revert';
          this.cause = entry.failure;
        } else if (entry.state === 'RUNNING') this.phase = 'forward';
        continue;
      }
      if (entry.subflow === true) {
        const scope = this.compiled.scopes.get(rename.get(entry.task) ?? entry.task);
        if (!scope || entry.attempt === undefined) continue;
        if (entry.state === 'RETRYING') {
          this.flowAttempts.set(scope.name, entry.attempt);
          this.pendingFlowRetry = {
            name: scope.name,
            failure: entry.failure ?? failureOf(null, ''),
          };
        } else if (entry.state === 'RUNNING') {
          this.flowCurrent.set(scope.name, entry.attempt);
          if (this.pendingFlowRetry?.name === scope.name) this.pendingFlowRetry = undefined;
        }
        continue;
      }
      const atom = this.compiled.byName.get(rename.get(entry.task) ?? entry.task);
      if (!atom) continue;
      const index = atom.index;
      this.states[index] = entry.state;
      if (entry.attempt !== undefined) this.attempts[index] = entry.attempt;
      if (entry.state === 'SUCCESS') {
        this.results[index] = entry.result;
        this.completedAt[index] = ++this.completedCount;
        const revealed = reveal(entry.result, key);
        if (revealed.ok) this.bind(index, revealed.value);
        else for (const symbol of atom.provides) this.unavailable.add(symbol);
      } else if (entry.state === 'FAILURE' && entry.failure) this.failures.push(entry.failure);
      else if (entry.state === 'REVERTED') this.outcome({ task: atom.name, state: 'REVERTED' });
      else if (entry.state === 'REVERT_FAILURE' && entry.failure) {
        this.outcome({ task: atom.name, state: 'REVERT_FAILURE', failure: entry.failure });
      }
    }
  }

  /** Continues a restored run. */
  async continue(state: FlowState): Promise<unknown> {
    try {
      if (state === 'SUCCESS') return this.outputs();
      if (state === 'REVERTED' || state === 'CANCELLED') {
        const code = state === 'CANCELLED' ? 'tasks.cancelled' : 'tasks.flow_failed';
        throw new FlowFailed(
          code,
          this.flowId,
          this.failures.length ? this.failures : this.cause ? [this.cause] : [],
          [...this.reverts.values()],
        );
      }
      // Nothing to run may read a redacted value.
      if (this.phase === 'forward') {
        for (const atom of this.compiled.atoms) {
          if (this.states[atom.index] === 'SUCCESS') continue;
          for (const symbol of atom.task.requires) {
            if (
              this.unavailable.has(symbol) ||
              (!(symbol in this.inputs) && atom.sources[atom.task.requires.indexOf(symbol)] === -1)
            ) {
              throw new TasksError(
                'tasks.sensitive_unavailable',
                `cannot resume flow ${this.flowId}: task '${atom.name}' needs '${symbol}', which was not stored in clear; give the engine the secretKey or pass it in resume(…, { inputs })`,
                { details: { flowId: this.flowId, task: atom.name, symbol: symbol } },
              );
            }
          }
        }
        if (
          this.failures.length &&
          this.compiled.atoms.some((atom) => this.states[atom.index] === 'FAILURE')
        ) {
          this.phase = 'revert';
          this.cause = this.failures[0];
        }
      }
      if (this.phase === 'forward') {
        const pending = this.pendingFlowRetry;
        if (pending) {
          // Killed between logging a sub-flow's retry and starting its next attempt: finish the retry.
          const scope = this.compiled.scopes.get(pending.name)!;
          const attempt = this.flowAttempts.get(scope.name) ?? 1;
          const decision = scope.retry.onFailure({
            task: scope.name,
            attempt,
            error: pending.failure,
          });
          this.flowRetry = {
            name: scope.name,
            lo: scope.lo,
            hi: scope.hi,
            attempt,
            delayMs: decision.action === 'retry' ? (decision.delayMs ?? 0) : 0,
            failure: pending.failure,
          };
        }
        await this.flowState('RUNNING');
      } else {
        await this.flowState('REVERTING', this.cause);
      }
      return await this.execute();
    } finally {
      this.settle();
    }
  }

  /** Runs the forward phase (if still in it), then reverts on failure. */
  async execute(): Promise<unknown> {
    const signal = this.signal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    this.lease?.lost.addEventListener('abort', this.#onLost, { once: true });
    if (signal?.aborted) this.#onAbort();
    if (this.lease?.lost.aborted) this.#onLost();
    try {
      if (this.phase === 'forward') {
        await this.#forward();
        this.#throwIfStopped();
        if (this.failures.length === 0 && this.stopReason !== 'cancel') {
          await this.flowState('SUCCESS');
          return this.outputs();
        }
        this.cause =
          this.stopReason === 'cancel'
            ? { ...serializeError(signal?.reason ?? new Error('cancelled')), task: null }
            : this.failures[0];
        this.phase = 'revert';
        await this.flowState('REVERTING', this.cause);
      }
      const cancelled =
        this.stopReason === 'cancel' || (this.cause !== undefined && this.cause.task === null);
      if (this.stopReason === 'cancel') this.stopReason = undefined; // reverting goes on after a cancellation
      await this.revertAll();
      this.#throwIfStopped();
      const failed = this.states.some((s) => s === 'REVERT_FAILURE');
      const failures = this.failures.length ? this.failures : this.cause ? [this.cause] : [];
      const reverts = [...this.reverts.values()];
      if (failed) {
        await this.flowState('REVERT_FAILURE', this.cause);
        throw new FlowFailed('tasks.revert_failed', this.flowId, failures, reverts);
      }
      await this.flowState(cancelled ? 'CANCELLED' : 'REVERTED', this.cause);
      throw new FlowFailed(
        cancelled ? 'tasks.cancelled' : 'tasks.flow_failed',
        this.flowId,
        failures,
        reverts,
      );
    } finally {
      signal?.removeEventListener('abort', this.#onAbort);
      this.lease?.lost.removeEventListener('abort', this.#onLost);
      this.settle();
    }
  }

  #throwIfStopped(): void {
    if (this.fatal !== undefined) {
      if (this.stopReason === 'lost') throw this.#lostError(this.fatal);
      throw this.fatal;
    }
    if (this.stopReason === 'lost') throw this.#lostError();
  }

  #lostError(cause?: unknown): TasksError {
    return new TasksError(
      'tasks.ownership_lost',
      `flow ${this.flowId} stopped: this engine lost its lease; whoever acquires it next can resume the flow`,
      { cause: cause ?? this.lease?.lost.reason, details: { flowId: this.flowId } },
    );
  }

  /** Runs every task not yet completed, in dependency order, `concurrency` at a time. */
  async #forward(): Promise<void> {
    const { atoms, rank } = this.compiled;
    const states = this.states;
    const waiting = new Int32Array(atoms.length);
    let ready = new MinHeap((index) => rank[index]!);
    const rebuild = () => {
      ready = new MinHeap((index) => rank[index]!);
      for (const atom of atoms) {
        if (states[atom.index] === 'SUCCESS') continue;
        let count = 0;
        for (const predecessor of atom.preds) if (states[predecessor] !== 'SUCCESS') count++;
        waiting[atom.index] = count;
        if (count === 0) ready.push(atom.index);
      }
    };
    rebuild();
    await pump(this.context.concurrency, {
      fail: (error) => {
        this.fatal ??= error;
      },
      next: () =>
        ready.size > 0 &&
        this.stopReason === undefined &&
        this.failures.length === 0 &&
        this.fatal === undefined &&
        this.flowRetry === undefined
          ? ready.pop()
          : -1,
      start: (index) => this.runAtom(index),
      done: (index, ok) => {
        if (!ok) return;
        for (const successor of atoms[index]!.succs) {
          if (--waiting[successor]! === 0) ready.push(successor);
        }
      },
      idle: async () => {
        const retry = this.flowRetry;
        if (retry === undefined || this.fatal !== undefined) return false;
        this.flowRetry = undefined;
        if (this.stopReason !== undefined || this.failures.length > 0) {
          if (this.stopReason === undefined) this.failures.push(retry.failure);
          return false;
        }
        await this.retryFlow(retry);
        rebuild();
        return true;
      },
    });
    if (this.fatal === undefined && this.stopReason === 'suspend') await this.suspended();
  }
}
