import { raceAbort, scopedSignal, serializeError } from '@rigging/core';
import type { Clock, TypedEmitter } from '@rigging/core';
import { DestroyGraphError } from './errors.js';
import type { DestroyGraphEvents } from './events.js';
import type { TypeRegistry } from './registry.js';
import { DESTROYED, DOOMED } from './store.js';
import type { Store } from './store.js';
import type { DestroyReport, Handle, RunFailure } from './types.js';

/** @internal What a run needs from its graph. */
export interface RunContext {
  /** Passed as is to destroy functions and handlers. */
  readonly graph: object;
  readonly store: Store;
  readonly registry: TypeRegistry;
  readonly events: TypedEmitter<DestroyGraphEvents>;
  readonly clock: Clock;
  /** Removes destroyed objects from the graph; returns their ids. */
  drop(nodes: Handle[]): string[];
}

/** @internal A run's options, validated. */
export interface RunSettings {
  concurrency: number;
  policy: 'stop' | 'continue';
  timeoutMs: number | undefined;
  signal: AbortSignal | undefined;
}

type Outcome = 'ok' | 'aborted' | { error: unknown; timedOut: boolean };

/**
 * @internal One {@link ObjectGraph.destroy} run: notify (groups in reverse order), destroy
 * (groups in direct order), then keep what is reachable again and drop the rest.
 */
export class DestroyRun {
  readonly #context: RunContext;
  readonly #settings: RunSettings;
  readonly #groups: Handle[][];
  readonly #all: Handle[];
  readonly #report: DestroyReport;
  #stop = false;

  constructor(context: RunContext, runId: number, groups: Handle[][], settings: RunSettings) {
    this.#context = context;
    this.#settings = settings;
    this.#groups = groups.map((group) => group.filter((node) => !this.#destroyed(node)));
    this.#all = this.#groups.flat();
    this.#report = {
      runId,
      status: 'completed',
      destroyed: [],
      failed: [],
      pending: [],
      resurrected: [],
      dropped: [],
    };
  }

  /** Runs both steps and settles; resolves with the report. */
  async run(): Promise<DestroyReport> {
    const { store, events } = this.#context;
    const { runId } = this.#report;
    const { signal } = this.#settings;
    try {
      for (const node of this.#all) store.flags[node.index]! |= DOOMED;
      events.emit('destroy:started', {
        runId,
        objects: this.#all.length,
        groups: this.#groups.length,
      });
      this.#groups.forEach((members, group) => {
        for (const node of members) {
          events.emit('destroy:scheduled', { runId, id: node.id, type: node.type, group });
        }
      });
      for (let group = this.#groups.length - 1; group >= 0 && !this.#stop; group--) {
        await this.#pool(this.#notifications(group));
      }
      for (let group = 0; group < this.#groups.length && !this.#stop; group++) {
        await this.#pool(this.#destructions(group));
      }
      this.#report.status = signal?.aborted ? 'aborted' : this.#stop ? 'stopped' : 'completed';
    } finally {
      for (const node of this.#all) if (node.index >= 0) store.flags[node.index]! &= ~DOOMED;
    }
    return this.#settle();
  }

  /** Step 1 for one group: every live subscriber of a doomed publisher, its handler called once. */
  #notifications(group: number): Array<() => Promise<void>> {
    const { store, registry, graph, events } = this.#context;
    const { runId } = this.#report;
    const jobs: Array<() => Promise<void>> = [];
    for (const publisher of this.#groups[group]!) {
      if (publisher.index < 0) continue;
      for (const record of store.subscriptionsOf(publisher.index)) {
        const subscriber = store.nodes[store.subscriberOf(record)]!;
        if (this.#destroyed(subscriber)) continue;
        const handler = registry.handler(subscriber.type, store.handlers[record]);
        if (!handler) continue;
        jobs.push(async () => {
          const outcome = await this.#call((signal) =>
            handler(publisher, { subscriber, signal, graph, group }),
          );
          if (outcome === 'ok') {
            events.emit('destroy:notified', {
              runId,
              id: publisher.id,
              subscriber: subscriber.id,
              group,
            });
          } else if (outcome !== 'aborted') {
            this.#fail(publisher, group, outcome, subscriber);
          }
        });
      }
    }
    return jobs;
  }

  /** Step 2 for one group: every object's destroy functions, then its destroyed flag. */
  #destructions(group: number): Array<() => Promise<void>> {
    const { store, registry, graph, events, clock } = this.#context;
    const { runId } = this.#report;
    return this.#groups
      [group]!.filter((node) => !this.#destroyed(node))
      .map((node) => async () => {
        const fns = registry.destroyFns(node.type, node.destroyFn);
        const started = clock.now();
        events.emit('destroy:destroying', { runId, id: node.id, type: node.type, group });
        const outcome = await this.#call(async (signal) => {
          for (const fn of fns) await fn(node, { signal, graph, group });
        });
        if (outcome === 'ok') {
          if (node.index >= 0) store.flags[node.index]! |= DESTROYED;
          this.#report.destroyed.push(node.id);
          events.emit('destroy:destroyed', {
            runId,
            id: node.id,
            type: node.type,
            group,
            durationMs: clock.now() - started,
          });
        } else if (outcome !== 'aborted') {
          this.#fail(node, group, outcome);
        }
      });
  }

  #fail(
    node: Handle,
    group: number,
    outcome: { error: unknown; timedOut: boolean },
    subscriber?: Handle,
  ): void {
    const failure: RunFailure = subscriber
      ? {
          id: node.id,
          step: 'notify',
          subscriber: subscriber.id,
          timedOut: outcome.timedOut,
          error: serializeError(outcome.error),
        }
      : {
          id: node.id,
          step: 'destroy',
          timedOut: outcome.timedOut,
          error: serializeError(outcome.error),
        };
    this.#report.failed.push(failure);
    this.#context.events.emit('destroy:failed', {
      runId: this.#report.runId,
      type: node.type,
      group,
      ...failure,
    });
    if (this.#settings.policy === 'stop') this.#stop = true;
  }

  /** Keeps what is reachable again (resurrected), drops the rest; emits `destroy:finished`. */
  #settle(): DestroyReport {
    const { store, events } = this.#context;
    const report = this.#report;
    const mark = store.reach(true);
    const drop: Handle[] = [];
    for (const node of this.#all) {
      if (!this.#destroyed(node)) {
        report.pending.push(node.id);
      } else if (node.index >= 0 && store.mark[node.index] === mark) {
        report.resurrected.push(node.id);
        events.emit('destroy:resurrected', { runId: report.runId, id: node.id, type: node.type });
      } else {
        drop.push(node);
      }
    }
    report.dropped = this.#context.drop(drop);
    events.emit('destroy:finished', {
      runId: report.runId,
      status: report.status,
      destroyed: report.destroyed.length,
      failed: report.failed.length,
      pending: report.pending.length,
      resurrected: report.resurrected.length,
    });
    return report;
  }

  #destroyed(node: Handle): boolean {
    return node.index < 0 || (this.#context.store.flags[node.index]! & DESTROYED) !== 0;
  }

  /** Runs `jobs` with at most `concurrency` at once; stops starting new ones once aborted. */
  async #pool(jobs: Array<() => Promise<void>>): Promise<void> {
    const { concurrency, signal } = this.#settings;
    let next = 0;
    const worker = async () => {
      while (next < jobs.length && !signal?.aborted) {
        const job = jobs[next++]!;
        await job();
      }
    };
    const workers: Array<Promise<void>> = [];
    for (let k = 0; k < Math.min(concurrency, jobs.length); k++) workers.push(worker());
    await Promise.all(workers);
    if (signal?.aborted) this.#stop = true;
  }

  /** Calls `fn` with a signal that aborts with the run or after `timeoutMs`. */
  async #call(fn: (signal: AbortSignal) => unknown): Promise<Outcome> {
    const { signal, timeoutMs } = this.#settings;
    if (signal?.aborted) return 'aborted';
    using scope = scopedSignal({
      signal,
      timeoutMs,
      onTimeout: () =>
        new DestroyGraphError('destroy-graph.timeout', `timed out after ${String(timeoutMs)} ms`, {
          details: { timeoutMs: timeoutMs ?? null },
        }),
    });
    try {
      await raceAbort(
        Promise.resolve().then(() => fn(scope.signal)),
        scope.signal,
      );
      return 'ok';
    } catch (error) {
      if (scope.timedOut) return { error, timedOut: true };
      if (signal?.aborted) return 'aborted';
      return { error, timedOut: false };
    }
  }
}
