import {
  positiveIntegerOption,
  positiveOption,
  TypedEmitter,
  type Clock,
  type Logger,
} from '@rigging/core';
import type { FlowEngine, MigrateHook } from './engine-types.js';
import { FlowFailed } from './errors.js';
import { resumableReason } from './flow-handler.js';
import type { Flow } from './flow.js';
import type { FlowState } from './log.js';
import { suspendOnAbort } from './run-or-resume.js';
import type { Task } from './task.js';

/** Options of {@link Engine.startRecovery}. */
export interface RecoveryOptions {
  /**
   * The flow definitions this engine can resume, matched to logged flows by the root flow's
   * name. Logged flows of other names are left alone (another service may own them).
   */
  flows: readonly (Flow | Task)[];
  /** Flows resumed at once, at most. @default 4 */
  concurrency?: number;
  /** Pause between two scans of the log (on the engine's clock). @default 30000 */
  intervalMs?: number;
  /**
   * Flow states that mean "unfinished, owner may be gone". `SUSPENDED` is left out by default: a
   * suspended flow was stopped on purpose and whoever suspended it resumes it.
   * @default ['RUNNING', 'REVERTING']
   */
  states?: readonly FlowState[];
  /** Passed on to `resume` (a log written by an older definition). */
  migrate?: MigrateHook;
  /** Flows listed per scan, newest first. @default 1000 */
  limit?: number;
  /** Stops recovery as `stop()` does. */
  signal?: AbortSignal;
}

/** Payload of `recovery:resuming`. */
export interface RecoveryResumingEvent {
  /** The flow's id. */
  flowId: string;
  /** The flow's (root) name. */
  flow: string;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Payload of `recovery:finished`. */
export interface RecoveryFinishedEvent extends RecoveryResumingEvent {
  /**
   * `succeeded`: the flow finished; `failed`: it failed for real (reverted, or a revert failed);
   * `stopped`: it stopped again and stays resumable (suspended, lease lost, connection lost);
   * `busy`: another engine owns it (its owner is alive): a later scan tries again.
   */
  outcome: 'succeeded' | 'failed' | 'stopped' | 'busy';
  /** What `resume` threw (all outcomes but `succeeded`). */
  error?: unknown;
}

/** Payload of `recovery:refused`. */
export interface RecoveryRefusedEvent extends RecoveryResumingEvent {
  /** Why it cannot be resumed: `tasks.incompatible_log` (the definition changed) or another error. */
  error: unknown;
}

/** Payload of `recovery:error`. */
export interface RecoveryErrorEvent {
  /** What failed while scanning the log; the next scan tries again. */
  error: unknown;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Events of a {@link Recovery}. */
export interface RecoveryEvents {
  /** A flow whose owner looks gone is being resumed. */
  'recovery:resuming': RecoveryResumingEvent;
  /** A resume ended. */
  'recovery:finished': RecoveryFinishedEvent;
  /** A flow cannot be resumed by this engine (reported once per flow; the others go on). */
  'recovery:refused': RecoveryRefusedEvent;
  /** Listing the log failed. */
  'recovery:error': RecoveryErrorEvent;
}

/** What {@link Recovery} needs from its engine. @internal */
export interface RecoveryHost {
  readonly engine: FlowEngine;
  readonly clock: Clock;
  readonly logger: Logger;
}

/**
 * Resumes the unfinished flows of an engine's log whose owner is gone, by itself: a scan at
 * start, then one every `intervalMs`. Made by {@link Engine.startRecovery}; stop it with
 * `stop()` or `await using`.
 */
export class Recovery extends TypedEmitter<RecoveryEvents> implements AsyncDisposable {
  readonly #engine: FlowEngine;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #definitions = new Map<string, Flow | Task>();
  readonly #concurrency: number;
  readonly #intervalMs: number;
  readonly #states: readonly FlowState[];
  readonly #migrate: MigrateHook | undefined;
  readonly #limit: number;
  readonly #stop = new AbortController();
  /** Flows being resumed now, and how each ends. */
  readonly #inflight = new Map<string, Promise<void>>();
  /** Candidates found by the last scan and not started yet, oldest first. */
  #pending: { flowId: string; name: string }[] = [];
  /** Flows reported as refused (not tried again by this recovery). */
  readonly #refused = new Set<string>();
  #scans = 0;
  readonly #loop: Promise<void>;

  /** @internal Use {@link Engine.startRecovery}. */
  constructor(host: RecoveryHost, options: RecoveryOptions) {
    super();
    if (!options || typeof options !== 'object')
      throw new TypeError('startRecovery(options): options must be an object');
    if (!Array.isArray(options.flows) || options.flows.length === 0)
      throw new TypeError('startRecovery({ flows }): flows must be a non-empty array of flows');
    for (const flow of options.flows) {
      if (!flow || typeof flow !== 'object' || typeof flow.name !== 'string')
        throw new TypeError('startRecovery({ flows }): every entry must be a flow or a task');
      if (this.#definitions.has(flow.name))
        throw new TypeError(`startRecovery({ flows }): two definitions are named '${flow.name}'`);
      this.#definitions.set(flow.name, flow);
    }
    this.#concurrency = positiveIntegerOption(
      'startRecovery',
      'concurrency',
      options.concurrency,
      4,
    );
    this.#intervalMs = positiveOption('startRecovery', 'intervalMs', options.intervalMs, 30_000);
    this.#limit = positiveIntegerOption('startRecovery', 'limit', options.limit, 1000);
    this.#states = options.states ?? ['RUNNING', 'REVERTING'];
    if (!Array.isArray(this.#states) || this.#states.length === 0)
      throw new TypeError('startRecovery({ states }): states must be a non-empty array');
    this.#migrate = options.migrate;
    this.#engine = host.engine;
    this.#clock = host.clock;
    this.#logger = host.logger;
    if (options.signal) {
      if (options.signal.aborted) this.#stop.abort(options.signal.reason);
      else
        options.signal.addEventListener('abort', () => this.#stop.abort(options.signal!.reason), {
          once: true,
        });
    }
    this.#loop = this.#run();
  }

  /** Ids of the flows being resumed now. */
  get recovering(): string[] {
    return [...this.#inflight.keys()];
  }

  /** Scans done so far (for tests and dashboards). */
  get scans(): number {
    return this.#scans;
  }

  /** Whether `stop()` was called (or the signal aborted). */
  get stopped(): boolean {
    return this.#stop.signal.aborted;
  }

  /**
   * Stops scanning and suspends the flows being resumed (at their next task boundary: nothing
   * is reverted, they stay resumable); resolves once they stopped. Idempotent.
   */
  async stop(): Promise<void> {
    if (!this.#stop.signal.aborted) this.#stop.abort(new Error('recovery stopped'));
    await this.#loop;
    await Promise.all(this.#inflight.values());
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    // Let the caller subscribe to events before the first scan reports anything.
    await Promise.resolve();
    while (!signal.aborted) {
      await this.scan();
      try {
        await this.#clock.sleep(this.#intervalMs, { signal });
      } catch {
        break; // stopped
      }
    }
  }

  /**
   * Scans the log once now and starts resuming what it found (up to `concurrency` at a time);
   * resolves when the scan is done, not when the flows are. Also run at start and every
   * `intervalMs`.
   */
  async scan(): Promise<void> {
    if (this.#stop.signal.aborted) return;
    this.#scans++;
    let found;
    try {
      found = await this.#engine.log.flows({ states: this.#states, limit: this.#limit });
    } catch (error) {
      this.#logger.warn({ err: error }, 'flow recovery: listing the task log failed');
      this.emit('recovery:error', { error, at: this.#clock.now() });
      return;
    }
    const running = new Set(this.#engine.running);
    // Oldest first: they have waited longest.
    this.#pending = found
      .filter(
        (f) =>
          this.#definitions.has(f.name) &&
          !this.#refused.has(f.flowId) &&
          !this.#inflight.has(f.flowId) &&
          !running.has(f.flowId),
      )
      .reverse()
      .map((f) => ({ flowId: f.flowId, name: f.name }));
    this.#pump();
  }

  /** Starts pending resumes while there is room. */
  #pump(): void {
    while (
      !this.#stop.signal.aborted &&
      this.#inflight.size < this.#concurrency &&
      this.#pending.length > 0
    ) {
      const next = this.#pending.shift()!;
      if (this.#inflight.has(next.flowId) || this.#engine.running.includes(next.flowId)) continue;
      const done = this.#resume(next.flowId, next.name).finally(() => {
        this.#inflight.delete(next.flowId);
        this.#pump();
      });
      this.#inflight.set(next.flowId, done);
    }
  }

  async #resume(flowId: string, name: string): Promise<void> {
    const definition = this.#definitions.get(name)!;
    const base = { flowId, flow: name };
    this.emit('recovery:resuming', { ...base, at: this.#clock.now() });
    const stopping = suspendOnAbort(this.#engine, flowId, this.#stop.signal);
    try {
      await this.#engine.resume(
        flowId,
        definition,
        this.#migrate ? { migrate: this.#migrate } : {},
      );
      this.emit('recovery:finished', { ...base, outcome: 'succeeded', at: this.#clock.now() });
    } catch (error) {
      const at = this.#clock.now();
      if (error instanceof FlowFailed) {
        this.emit('recovery:finished', { ...base, outcome: 'failed', error, at });
        return;
      }
      const reason = resumableReason(error, this.#engine.log);
      if (reason === 'flow_busy') {
        this.emit('recovery:finished', { ...base, outcome: 'busy', error, at });
      } else if (reason !== undefined) {
        this.emit('recovery:finished', { ...base, outcome: 'stopped', error, at });
      } else {
        // A changed definition (tasks.incompatible_log), a missing secret, …: this engine cannot
        // resume it; report it once and go on with the others.
        this.#refused.add(flowId);
        this.#logger.warn(
          { err: error, flowId, flow: name },
          'flow recovery: this flow cannot be resumed here',
        );
        this.emit('recovery:refused', { ...base, error, at });
      }
    } finally {
      stopping[Symbol.dispose]();
    }
  }
}
