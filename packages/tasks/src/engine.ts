import { randomUUID } from 'node:crypto';
import {
  deferred,
  explainNotJson,
  serializeError,
  silentLogger,
  systemClock,
  TypedEmitter,
  type Clock,
  type Json,
  type JsonObject,
  type Lease,
  type LockProvider,
  type Logger,
} from '@rigging/core';
import { FlowFailed, TasksError, type RevertOutcome, type TaskFailure } from './errors.js';
import { compile, MinHeap, validateFlow, type CompiledFlow, type Flow, type Node } from './flow.js';
import {
  memoryLog,
  notFound,
  SETTLED,
  type FlowDefinition,
  type FlowState,
  type FlowSummary,
  type LogEntry,
  type TaskLog,
  type TaskState,
} from './log.js';
import { checkKey, protect, REDACTED, reveal } from './secrets.js';
import type { Task, TaskContext } from './task.js';

/** Payload of `task:state`. */
export interface TaskStateEvent {
  flowId: string;
  /** The flow's name. */
  flow: string;
  task: string;
  state: TaskState;
  attempt: number;
  /** The result (on SUCCESS; `'[redacted]'` for sensitive tasks). */
  result?: unknown;
  failure?: TaskFailure;
  /** Epoch milliseconds (engine clock). */
  at: number;
}

/** Payload of `flow:state`. */
export interface FlowStateEvent {
  flowId: string;
  flow: string;
  state: FlowState;
  failure?: TaskFailure;
  at: number;
}

/** Events of an {@link Engine}. */
export interface EngineEvents {
  /** Every task transition, after it is durable in the log. */
  'task:state': TaskStateEvent;
  /** Every flow transition, after it is durable in the log. */
  'flow:state': FlowStateEvent;
}

/** Options of {@link Engine}. */
export interface EngineOptions {
  /** Where transitions are recorded. @default memoryLog() */
  log?: TaskLog;
  /** When given, a flow runs only while its engine holds the flow's lease (fencing token recorded on every write). */
  locks?: LockProvider;
  /** Tasks run (and are reverted) in parallel up to this many. @default 1 */
  concurrency?: number;
  /** @default silentLogger */
  logger?: Logger;
  /** @default systemClock */
  clock?: Clock;
  /**
   * When a revert fails: `'stop'` reverting and report (the flow stays resumable), or continue
   * reverting the others (`'tolerant'`). Both end with `tasks.revert_failed`. @default 'stop'
   */
  onRevertFailure?: 'stop' | 'tolerant';
  /** 32-byte AES-256-GCM key: sensitive values are encrypted with it instead of redacted. */
  secretKey?: Uint8Array;
  /** Prefix of lock keys (the flow id follows). @default 'rigging-tasks:' */
  lockPrefix?: string;
}

/** Options of {@link Engine.run}. */
export interface RunOptions<I> {
  inputs: I;
  /** @default a random UUID */
  flowId?: string;
  /** Cancels the flow: running tasks see `ctx.signal` abort, then completed tasks are reverted. */
  signal?: AbortSignal;
}

/** What a {@link MigrateHook} returns. */
export interface MigrateDecision {
  /** Old task name → new task name. */
  rename?: Record<string, string>;
  /** Accept the remaining differences (added tasks run; removed ones are ignored; versions accepted). */
  accept?: boolean;
}

/** Maps a log written by an older flow definition onto the current one. */
export type MigrateHook = (
  stored: FlowDefinition,
  current: FlowDefinition,
) => MigrateDecision | undefined;

/** Options of {@link Engine.resume}. */
export interface ResumeOptions {
  /** Inputs to supply again (e.g. redacted sensitive inputs); merged over the stored ones. */
  inputs?: Record<string, unknown>;
  signal?: AbortSignal;
  migrate?: MigrateHook;
}

/** Differences found between a stored flow definition and the current one. */
export interface Incompatibility {
  added: string[];
  removed: string[];
  reordered: string[];
  versions: { task: string; from: string; to: string }[];
}

type StopReason = 'suspend' | 'lost' | 'cancel';

/** A sub-flow about to be retried: its atoms are `lo`..`hi - 1`; `attempt` is the one that failed. */
interface FlowRetry {
  name: string;
  lo: number;
  hi: number;
  attempt: number;
  delayMs: number;
  failure: TaskFailure;
}

function major(v: string): string {
  const i = v.indexOf('.');
  return i < 0 ? v : v.slice(0, i);
}

// Both depend on the compiled flow alone: computed once per flow, not once per run (a run of
// n tasks would otherwise allocate and walk n more objects before its first task).
const definitions = new WeakMap<CompiledFlow, FlowDefinition>();
const sensitives = new WeakMap<CompiledFlow, ReadonlySet<string>>();

/** The flow's shape as the log records it (frozen: every run's record shares it). */
function definitionOf(c: CompiledFlow): FlowDefinition {
  let d = definitions.get(c);
  if (d === undefined) {
    const tasks = c.order.map((i) =>
      Object.freeze({ name: c.atoms[i]!.name, version: c.atoms[i]!.task.version }),
    );
    d = Object.freeze({
      flow: c.root.name,
      version: c.root.version,
      tasks: Object.freeze(tasks) as FlowDefinition['tasks'],
    });
    definitions.set(c, d);
  }
  return d;
}

/** Symbols whose values must not be stored in clear. */
function sensitiveSymbols(c: CompiledFlow): ReadonlySet<string> {
  let out = sensitives.get(c);
  if (out === undefined) {
    const set = new Set<string>();
    for (const a of c.atoms) {
      const s = a.task.sensitive;
      if (s === true) {
        for (const r of a.task.requires) set.add(r);
        for (const p of a.provides) set.add(p);
      } else if (Array.isArray(s)) for (const x of s as readonly string[]) set.add(x);
    }
    sensitives.set(c, (out = set));
  }
  return out;
}

function isSensitiveResult(t: Task, atomProvides: string[], symbols: ReadonlySet<string>): boolean {
  if (t.sensitive === true) return true;
  for (const p of atomProvides) if (symbols.has(p)) return true;
  return false;
}

const NO_EXTRA: { result?: unknown; failure?: TaskFailure } = Object.freeze({});

/** `explainNotJson`, without its allocations for the common scalar results. */
function whyNotJson(value: unknown): string | undefined {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return undefined;
  if (typeof value === 'number' && Number.isFinite(value)) return undefined;
  return explainNotJson(value, 'result');
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (
    v !== null &&
    (typeof v === 'object' || typeof v === 'function') &&
    typeof (v as { then?: unknown }).then === 'function'
  );
}

function failureOf(task: string | null, error: unknown): TaskFailure {
  return { ...serializeError(error), task };
}

/**
 * Runs flows: tasks in dependency order (in parallel up to `concurrency`), every transition made
 * durable in the log before the next task starts; on failure, completed tasks are reverted in
 * exact reverse order of completion.
 */
export class Engine extends TypedEmitter<EngineEvents> {
  readonly log: TaskLog;
  readonly concurrency: number;
  readonly #locks: LockProvider | undefined;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #mode: 'stop' | 'tolerant';
  readonly #key: Uint8Array | undefined;
  readonly #prefix: string;
  readonly #active = new Map<string, FlowRun>();

  constructor(options: EngineOptions = {}) {
    super();
    if (options === null || typeof options !== 'object')
      throw new TypeError('Engine options must be an object');
    const c = options.concurrency ?? 1;
    if (!Number.isInteger(c) || c < 1)
      throw new TypeError(`concurrency must be an integer >= 1, got ${String(c)}`);
    const mode = options.onRevertFailure ?? 'stop';
    if (mode !== 'stop' && mode !== 'tolerant') {
      throw new TypeError(`onRevertFailure must be 'stop' or 'tolerant', got ${String(mode)}`);
    }
    this.log = options.log ?? memoryLog();
    this.concurrency = c;
    this.#locks = options.locks;
    this.#logger = options.logger ?? silentLogger;
    this.#clock = options.clock ?? systemClock;
    this.#mode = mode;
    this.#key = checkKey(options.secretKey);
    this.#prefix = options.lockPrefix ?? 'rigging-tasks:';
  }

  /** Runs a new flow to completion; resolves with the provided symbols or throws {@link FlowFailed}. */
  async run<I, O>(flow: Flow<I, O> | Task<I, O>, options: RunOptions<I>): Promise<O> {
    if (!options || typeof options !== 'object')
      throw new TypeError('run(flow, options): options must be an object');
    const inputs = (options.inputs ?? {}) as Record<string, unknown>;
    if (typeof inputs !== 'object' || inputs === null || Array.isArray(inputs)) {
      throw new TypeError('run(flow, { inputs }): inputs must be an object');
    }
    const compiled = validateFlow(flow as Node, inputs);
    const flowId = options.flowId ?? randomUUID();
    if (typeof flowId !== 'string' || !flowId || flowId.length > 190) {
      throw new TypeError(
        `flowId must be a non-empty string of at most 190 characters, got ${JSON.stringify(flowId)}`,
      );
    }
    options.signal?.throwIfAborted();
    const symbols = sensitiveSymbols(compiled);
    const storedInputs: JsonObject = {};
    for (const [k, v] of Object.entries(inputs)) {
      if (symbols.has(k)) storedInputs[k] = protect(v, this.#key);
      else {
        const why = explainNotJson(v, `inputs.${k}`);
        if (why) {
          throw new TasksError(
            'tasks.result_not_serializable',
            `flow input '${k}' is not JSON: ${why}`,
            {
              details: { input: k, reason: why },
            },
          );
        }
        storedInputs[k] = v as Json;
      }
    }
    return this.#own(flowId, async (lease) => {
      const run = new FlowRun(this, compiled, flowId, lease, options.signal, symbols);
      run.inputs = inputs;
      const at = this.#clock.now();
      const token = lease?.token ?? null;
      await this.log.create(
        {
          flowId,
          name: compiled.root.name,
          state: 'RUNNING',
          definition: definitionOf(compiled),
          inputs: storedInputs,
          token,
          createdAt: at,
          updatedAt: at,
        },
        [{ seq: ++run.seq, task: null, state: 'RUNNING', at, token }],
      );
      run.emitFlow('RUNNING', at);
      return (await run.execute()) as O;
    });
  }

  /**
   * Continues a flow from its log, in any process: completed tasks are not re-run (their stored
   * results are reused), an interrupted revert continues reverting, a finished flow returns its
   * outcome. Fails with `tasks.incompatible_log` before running anything when the flow changed.
   */
  async resume<I, O>(
    flowId: string,
    flow: Flow<I, O> | Task<I, O>,
    options: ResumeOptions = {},
  ): Promise<O> {
    const compiled = compile(flow as Node);
    options.signal?.throwIfAborted();
    return this.#own(flowId, async (lease) => {
      const loaded = await this.log.load(flowId);
      if (!loaded) throw notFound(flowId);
      const symbols = sensitiveSymbols(compiled);
      const rename = checkCompatible(
        loaded.record.definition,
        definitionOf(compiled),
        options.migrate,
        flowId,
      );
      const run = new FlowRun(this, compiled, flowId, lease, options.signal, symbols);
      const inputs: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(loaded.record.inputs)) {
        const r = reveal(v, this.#key);
        if (r.ok) inputs[k] = r.value;
      }
      Object.assign(inputs, options.inputs ?? {});
      run.inputs = inputs;
      run.restore(loaded.entries, rename);
      return (await run.continue(loaded.record.state)) as O;
    });
  }

  /** Asks a flow running in this engine to stop at the next task boundary (resumable later). Resolves once it stopped; `false` if it was not running here. */
  async suspend(flowId: string): Promise<boolean> {
    const run = this.#active.get(flowId);
    if (!run || typeof run.stop !== 'function') return false;
    run.stop('suspend');
    await run.settled;
    return true;
  }

  /** The audit trail of a flow: every transition, in order. */
  history(flowId: string): Promise<LogEntry[]> {
    return this.log.history(flowId);
  }

  /** Flows in the log, newest first. */
  flows(options?: { states?: readonly FlowState[]; limit?: number }): Promise<FlowSummary[]> {
    return this.log.flows(options);
  }

  /** Ids of flows this engine is running now. */
  get running(): string[] {
    return [...this.#active.keys()];
  }

  /** @internal */
  get internals() {
    return { logger: this.#logger, clock: this.#clock, mode: this.#mode, key: this.#key };
  }

  /** @internal */
  register(run: FlowRun): void {
    this.#active.set(run.flowId, run);
  }

  async #own<T>(flowId: string, body: (lease: Lease | undefined) => Promise<T>): Promise<T> {
    if (this.#active.has(flowId)) {
      throw new TasksError('tasks.flow_busy', `flow ${flowId} is already running in this engine`, {
        details: { flowId },
      });
    }
    let lease: Lease | undefined;
    if (this.#locks) {
      lease = await this.#locks.tryAcquire(this.#prefix + flowId);
      if (!lease) {
        throw new TasksError(
          'tasks.flow_busy',
          `flow ${flowId} is owned by another engine (lock ${this.#prefix + flowId} is held)`,
          {
            details: { flowId },
          },
        );
      }
    }
    // Reserve the id synchronously (the run registers itself with the same key).
    const placeholder = {} as FlowRun;
    this.#active.set(flowId, placeholder);
    try {
      return await body(lease);
    } finally {
      this.#active.delete(flowId);
      await lease
        ?.release()
        .catch((err: unknown) => this.#logger.warn({ err, flowId }, 'releasing flow lease failed'));
    }
  }
}

function checkCompatible(
  stored: FlowDefinition,
  current: FlowDefinition,
  migrate: MigrateHook | undefined,
  flowId: string,
): Map<string, string> {
  const decision = migrate?.(stored, current) ?? {};
  const rename = new Map(Object.entries(decision.rename ?? {}));
  const mapped = stored.tasks.map((t) => ({
    name: rename.get(t.name) ?? t.name,
    version: t.version,
  }));
  const now = new Map(current.tasks.map((t, i) => [t.name, { ...t, i }]));
  const before = new Set(mapped.map((t) => t.name));
  const diff: Incompatibility = {
    added: current.tasks.filter((t) => !before.has(t.name)).map((t) => t.name),
    removed: mapped.filter((t) => !now.has(t.name)).map((t) => t.name),
    reordered: [],
    versions: [],
  };
  let last = -1;
  for (const t of mapped) {
    const c = now.get(t.name);
    if (!c) continue;
    if (c.i < last) diff.reordered.push(t.name);
    last = Math.max(last, c.i);
    if (major(c.version) !== major(t.version))
      diff.versions.push({ task: t.name, from: t.version, to: c.version });
  }
  const bad =
    diff.added.length + diff.removed.length + diff.reordered.length + diff.versions.length > 0;
  if (bad && !decision.accept) {
    const parts: string[] = [];
    if (diff.added.length) parts.push(`added ${diff.added.map((n) => `'${n}'`).join(', ')}`);
    if (diff.removed.length) parts.push(`removed ${diff.removed.map((n) => `'${n}'`).join(', ')}`);
    if (diff.reordered.length)
      parts.push(`reordered ${diff.reordered.map((n) => `'${n}'`).join(', ')}`);
    if (diff.versions.length)
      parts.push(
        `versions ${diff.versions.map((v) => `'${v.task}' ${v.from} → ${v.to}`).join(', ')}`,
      );
    throw new TasksError(
      'tasks.incompatible_log',
      `flow ${flowId} was logged by an incompatible definition of '${stored.flow}': ${parts.join('; ')}; pass a migrate hook to map old names or accept the changes`,
      { details: { flowId, ...diff } as unknown as Json },
    );
  }
  return rename;
}

/** The state of one flow being run by an engine. */
class FlowRun {
  readonly flowId: string;
  seq = 0;
  inputs: Record<string, unknown> = {};
  settled: Promise<void>;
  readonly #settle: () => void;
  readonly #engine: Engine;
  readonly #c: CompiledFlow;
  readonly #lease: Lease | undefined;
  readonly #token: bigint | null;
  /** The `update` of every task-level append (never mutated by logs). */
  readonly #tokenOnly: { token: bigint | null };
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #symbols: ReadonlySet<string>;
  readonly #states: TaskState[];
  readonly #attempts: Int32Array;
  readonly #values = new Map<string, unknown>();
  /** Stored (possibly protected) results of completed atoms. */
  readonly #results: unknown[];
  readonly #completedAt: Float64Array;
  #completedCount = 0;
  readonly #failures: TaskFailure[] = [];
  readonly #reverts = new Map<string, RevertOutcome>();
  #cause: TaskFailure | undefined;
  #phase: 'forward' | 'revert' = 'forward';
  #stop: StopReason | undefined;
  #fatal: unknown;
  readonly #controller = new AbortController();
  readonly #revertController = new AbortController();
  readonly #signal: AbortSignal | undefined;
  #unavailable = new Set<string>();
  #flowRetry: FlowRetry | undefined;
  /** Failed attempts of each sub-flow with a retry controller (restored from the log). */
  readonly #flowAttempts = new Map<string, number>();
  /** The attempt each such sub-flow is running (1 until it is retried). */
  readonly #flowCurrent = new Map<string, number>();
  /** Restored: a sub-flow whose retry was logged but whose next attempt had not started. */
  #pendingFlowRetry: { name: string; failure: TaskFailure } | undefined;
  readonly #onAbort = () => {
    if (!this.#stop || this.#stop === 'suspend') this.#stop = 'cancel';
    this.#controller.abort(this.#signal?.reason);
  };
  readonly #onLost = () => {
    this.#stop = 'lost';
    this.#revertController.abort(this.#lease?.lost.reason);
  };

  constructor(
    engine: Engine,
    compiled: CompiledFlow,
    flowId: string,
    lease: Lease | undefined,
    signal: AbortSignal | undefined,
    symbols: ReadonlySet<string>,
  ) {
    this.#engine = engine;
    this.#c = compiled;
    this.flowId = flowId;
    this.#lease = lease;
    this.#token = lease?.token ?? null;
    this.#tokenOnly = { token: this.#token };
    const { logger, clock } = engine.internals;
    this.#logger = logger;
    this.#clock = clock;
    this.#symbols = symbols;
    const n = compiled.atoms.length;
    this.#states = new Array<TaskState>(n).fill('PENDING');
    this.#attempts = new Int32Array(n);
    this.#results = new Array<unknown>(n);
    this.#completedAt = new Float64Array(n);
    this.#signal = signal;
    const d = deferred<void>();
    this.settled = d.promise;
    this.#settle = () => d.resolve();
    engine.register(this);
  }

  stop(reason: StopReason): void {
    this.#stop ??= reason;
  }

  /** Folds a stored log into the run's state. */
  restore(entries: LogEntry[], rename: Map<string, string>): void {
    const key = this.#engine.internals.key;
    for (const e of entries) {
      if (e.seq > this.seq) this.seq = e.seq;
      if (e.task === null) {
        if (e.state === 'REVERTING') {
          this.#phase = 'revert';
          this.#cause = e.failure;
        } else if (e.state === 'RUNNING') this.#phase = 'forward';
        continue;
      }
      if (e.subflow === true) {
        const scope = this.#c.scopes.get(rename.get(e.task) ?? e.task);
        if (!scope || e.attempt === undefined) continue;
        if (e.state === 'RETRYING') {
          this.#flowAttempts.set(scope.name, e.attempt);
          this.#pendingFlowRetry = { name: scope.name, failure: e.failure ?? failureOf(null, '') };
        } else if (e.state === 'RUNNING') {
          this.#flowCurrent.set(scope.name, e.attempt);
          if (this.#pendingFlowRetry?.name === scope.name) this.#pendingFlowRetry = undefined;
        }
        continue;
      }
      const atom = this.#c.byName.get(rename.get(e.task) ?? e.task);
      if (!atom) continue;
      const i = atom.index;
      this.#states[i] = e.state;
      if (e.attempt !== undefined) this.#attempts[i] = e.attempt;
      if (e.state === 'SUCCESS') {
        this.#results[i] = e.result;
        this.#completedAt[i] = ++this.#completedCount;
        const r = reveal(e.result, key);
        if (r.ok) this.#bind(i, r.value);
        else for (const p of atom.provides) this.#unavailable.add(p);
      } else if (e.state === 'FAILURE' && e.failure) this.#failures.push(e.failure);
      else if (e.state === 'REVERTED') this.#outcome({ task: atom.name, state: 'REVERTED' });
      else if (e.state === 'REVERT_FAILURE' && e.failure) {
        this.#outcome({ task: atom.name, state: 'REVERT_FAILURE', failure: e.failure });
      }
    }
  }

  /** Continues a restored run. */
  async continue(state: FlowState): Promise<unknown> {
    try {
      if (state === 'SUCCESS') return this.#outputs();
      if (state === 'REVERTED' || state === 'CANCELLED') {
        const code = state === 'CANCELLED' ? 'tasks.cancelled' : 'tasks.flow_failed';
        throw new FlowFailed(
          code,
          this.flowId,
          this.#failures.length ? this.#failures : this.#cause ? [this.#cause] : [],
          [...this.#reverts.values()],
        );
      }
      // Nothing to run may read a redacted value.
      if (this.#phase === 'forward') {
        for (const a of this.#c.atoms) {
          if (this.#states[a.index] === 'SUCCESS') continue;
          for (const r of a.task.requires) {
            if (
              this.#unavailable.has(r) ||
              (!(r in this.inputs) && a.sources[a.task.requires.indexOf(r)] === -1)
            ) {
              throw new TasksError(
                'tasks.sensitive_unavailable',
                `cannot resume flow ${this.flowId}: task '${a.name}' needs '${r}', which was not stored in clear; give the engine the secretKey or pass it in resume(…, { inputs })`,
                { details: { flowId: this.flowId, task: a.name, symbol: r } },
              );
            }
          }
        }
        if (
          this.#failures.length &&
          this.#c.atoms.some((a) => this.#states[a.index] === 'FAILURE')
        ) {
          this.#phase = 'revert';
          this.#cause = this.#failures[0];
        }
      }
      if (this.#phase === 'forward') {
        const pending = this.#pendingFlowRetry;
        if (pending) {
          // Killed between logging a sub-flow's retry and starting its next attempt: finish the retry.
          const scope = this.#c.scopes.get(pending.name)!;
          const attempt = this.#flowAttempts.get(scope.name) ?? 1;
          const d = scope.retry.onFailure({ task: scope.name, attempt, error: pending.failure });
          this.#flowRetry = {
            name: scope.name,
            lo: scope.lo,
            hi: scope.hi,
            attempt,
            delayMs: d.action === 'retry' ? (d.delayMs ?? 0) : 0,
            failure: pending.failure,
          };
        }
        await this.#flowState('RUNNING');
      } else {
        await this.#flowState('REVERTING', this.#cause);
      }
      return await this.execute();
    } finally {
      this.#settle();
    }
  }

  /** Runs the forward phase (if still in it), then reverts on failure. */
  async execute(): Promise<unknown> {
    const signal = this.#signal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    this.#lease?.lost.addEventListener('abort', this.#onLost, { once: true });
    if (signal?.aborted) this.#onAbort();
    if (this.#lease?.lost.aborted) this.#onLost();
    try {
      if (this.#phase === 'forward') {
        await this.#forward();
        this.#throwIfStopped();
        if (this.#failures.length === 0 && this.#stop !== 'cancel') {
          await this.#flowState('SUCCESS');
          return this.#outputs();
        }
        this.#cause =
          this.#stop === 'cancel'
            ? { ...serializeError(signal?.reason ?? new Error('cancelled')), task: null }
            : this.#failures[0];
        this.#phase = 'revert';
        await this.#flowState('REVERTING', this.#cause);
      }
      const cancelled =
        this.#stop === 'cancel' || (this.#cause !== undefined && this.#cause.task === null);
      if (this.#stop === 'cancel') this.#stop = undefined; // reverting goes on after a cancellation
      await this.#revertAll();
      this.#throwIfStopped();
      const failed = this.#states.some((s) => s === 'REVERT_FAILURE');
      const failures = this.#failures.length ? this.#failures : this.#cause ? [this.#cause] : [];
      const reverts = [...this.#reverts.values()];
      if (failed) {
        await this.#flowState('REVERT_FAILURE', this.#cause);
        throw new FlowFailed('tasks.revert_failed', this.flowId, failures, reverts);
      }
      await this.#flowState(cancelled ? 'CANCELLED' : 'REVERTED', this.#cause);
      throw new FlowFailed(
        cancelled ? 'tasks.cancelled' : 'tasks.flow_failed',
        this.flowId,
        failures,
        reverts,
      );
    } finally {
      signal?.removeEventListener('abort', this.#onAbort);
      this.#lease?.lost.removeEventListener('abort', this.#onLost);
      this.#settle();
    }
  }

  #throwIfStopped(): void {
    if (this.#fatal !== undefined) {
      if (this.#stop === 'lost') throw this.#lostError(this.#fatal);
      throw this.#fatal;
    }
    if (this.#stop === 'lost') throw this.#lostError();
  }

  #lostError(cause?: unknown): TasksError {
    return new TasksError(
      'tasks.ownership_lost',
      `flow ${this.flowId} stopped: this engine lost its lease; whoever acquires it next can resume the flow`,
      { cause: cause ?? this.#lease?.lost.reason, details: { flowId: this.flowId } },
    );
  }

  async #suspended(): Promise<never> {
    await this.#flowState('SUSPENDED');
    throw new TasksError(
      'tasks.suspended',
      `flow ${this.flowId} suspended; resume it with engine.resume()`,
      {
        details: { flowId: this.flowId },
      },
    );
  }

  #outcome(o: RevertOutcome): void {
    this.#reverts.delete(o.task);
    this.#reverts.set(o.task, o);
  }

  #outputs(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [k, v] of this.#values) out[k] = v;
    return out;
  }

  #bind(i: number, value: unknown): void {
    const a = this.#c.atoms[i]!;
    const p = a.task.provides;
    if (p === undefined) return;
    if (typeof p === 'string') this.#values.set(p, value);
    else for (const k of p) this.#values.set(k, (value as Record<string, unknown>)[k]);
  }

  #inputsFor(i: number, params: JsonObject | undefined): Record<string, unknown> {
    const a = this.#c.atoms[i]!;
    const req = a.task.requires;
    const inputs: Record<string, unknown> = {};
    for (let k = 0; k < req.length; k++) {
      const r = req[k]!;
      inputs[r] = a.sources[k] === -1 ? this.inputs[r] : this.#values.get(r);
    }
    if (params) Object.assign(inputs, params);
    return inputs;
  }

  /** One entry, made durable (the update objects are built once per run: no allocation per write). */
  #write(entry: LogEntry, flowState?: FlowState): Promise<void> {
    return this.#engine.log.append(
      this.flowId,
      [entry],
      flowState ? { state: flowState, token: this.#token } : this.#tokenOnly,
    );
  }

  async #flowState(state: FlowState, failure?: TaskFailure): Promise<void> {
    const at = this.#clock.now();
    const entry: LogEntry = { seq: ++this.seq, task: null, state, at, token: this.#token };
    if (failure) entry.failure = failure;
    await this.#write(entry, state);
    this.emitFlow(state, at, failure);
  }

  emitFlow(state: FlowState, at: number, failure?: TaskFailure): void {
    if (!this.#engine.hasListeners('flow:state')) return;
    const e: FlowStateEvent = { flowId: this.flowId, flow: this.#c.root.name, state, at };
    if (failure) e.failure = failure;
    this.#engine.emit('flow:state', e);
  }

  async #transition(
    i: number,
    state: TaskState,
    extra: { result?: unknown; failure?: TaskFailure } = NO_EXTRA,
    also?: LogEntry[],
  ): Promise<void> {
    const has = 'result' in extra;
    const entry = this.#entryOf(i, state, has, extra.result, extra.failure);
    if (also) {
      for (const e of also) {
        e.seq = ++this.seq;
        e.at = entry.at;
      }
      await this.#engine.log.append(this.flowId, [entry, ...also], this.#tokenOnly);
    } else await this.#write(entry);
    this.#applied(i, entry, has, extra.result);
  }

  /** The log entry of a task transition (a SUCCESS result is kept for reverting). */
  #entryOf(
    i: number,
    state: TaskState,
    hasResult: boolean,
    result: unknown,
    failure: TaskFailure | undefined,
  ): LogEntry {
    const a = this.#c.atoms[i]!;
    const entry: LogEntry = {
      seq: ++this.seq,
      task: a.name,
      state,
      attempt: this.#attempts[i]!,
      at: this.#clock.now(),
      token: this.#token,
    };
    if (hasResult) {
      const stored = isSensitiveResult(a.task, a.provides, this.#symbols)
        ? protect(result, this.#engine.internals.key)
        : ((result ?? null) as Json);
      entry.result = stored;
      if (state === 'SUCCESS') this.#results[i] = stored;
    }
    if (failure) entry.failure = failure;
    return entry;
  }

  /** Once `entry` is durable: the task's state moves and `task:state` is emitted. */
  #applied(i: number, entry: LogEntry, hasResult: boolean, result: unknown): void {
    this.#states[i] = entry.state;
    if (!this.#engine.hasListeners('task:state')) return;
    const a = this.#c.atoms[i]!;
    const e: TaskStateEvent = {
      flowId: this.flowId,
      flow: this.#c.root.name,
      task: a.name,
      state: entry.state,
      attempt: entry.attempt!,
      at: entry.at,
    };
    if (hasResult)
      e.result = isSensitiveResult(a.task, a.provides, this.#symbols) ? REDACTED : result;
    if (entry.failure) e.failure = entry.failure;
    this.#engine.emit('task:state', e);
  }

  #ctx(i: number, signal: AbortSignal, params: JsonObject | undefined): TaskContext {
    const a = this.#c.atoms[i]!;
    return {
      signal,
      logger:
        this.#logger === silentLogger
          ? silentLogger
          : this.#logger.child({ flowId: this.flowId, task: a.name }),
      flowId: this.flowId,
      task: a.name,
      attempt: this.#attempts[i]!,
      params,
    };
  }

  /** Runs every task not yet completed, in dependency order, `concurrency` at a time. */
  async #forward(): Promise<void> {
    const { atoms, rank } = this.#c;
    const states = this.#states;
    const indeg = new Int32Array(atoms.length);
    let ready = new MinHeap((i) => rank[i]!);
    const rebuild = () => {
      ready = new MinHeap((i) => rank[i]!);
      for (const a of atoms) {
        if (states[a.index] === 'SUCCESS') continue;
        let d = 0;
        for (const p of a.preds) if (states[p] !== 'SUCCESS') d++;
        indeg[a.index] = d;
        if (d === 0) ready.push(a.index);
      }
    };
    rebuild();
    await this.#pump({
      next: () =>
        ready.size > 0 &&
        this.#stop === undefined &&
        this.#failures.length === 0 &&
        this.#fatal === undefined &&
        this.#flowRetry === undefined
          ? ready.pop()
          : -1,
      start: (i) => this.#runAtom(i),
      done: (i, ok) => {
        if (ok) for (const s of atoms[i]!.succs) if (--indeg[s]! === 0) ready.push(s);
      },
      idle: async () => {
        const retry = this.#flowRetry;
        if (retry === undefined || this.#fatal !== undefined) return false;
        this.#flowRetry = undefined;
        if (this.#stop !== undefined || this.#failures.length > 0) {
          if (this.#stop === undefined) this.#failures.push(retry.failure);
          return false;
        }
        await this.#retryFlow(retry);
        rebuild();
        return true;
      },
    });
    if (this.#fatal === undefined && this.#stop === 'suspend') await this.#suspended();
  }

  /**
   * Runs `start(i)` for each `i` that `next()` gives (-1: none now), at most `concurrency` at
   * once; `done` sees each outcome before the next pick. When nothing runs, `idle()` may restart
   * the loop (`true`) or end it. A rejection of `start` is fatal: recorded, nothing new starts.
   */
  async #pump(loop: {
    next: () => number;
    start: (i: number) => boolean | Promise<boolean>;
    done: (i: number, ok: boolean) => void;
    idle?: () => Promise<boolean>;
  }): Promise<void> {
    const limit = this.#engine.concurrency;
    if (limit === 1) {
      // One at a time: a plain loop (no promise, closure or wake-up per task).
      for (;;) {
        const i = loop.next();
        if (i < 0) {
          if (loop.idle && (await loop.idle())) continue;
          return;
        }
        let ok: boolean;
        try {
          const started = loop.start(i);
          ok = typeof started === 'boolean' ? started : await started;
        } catch (error) {
          this.#fatal ??= error;
          continue;
        }
        loop.done(i, ok);
      }
    }
    let running = 0;
    let woken = false;
    let wake: (() => void) | undefined;
    const settle = () => {
      running--;
      woken = true;
      wake?.();
    };
    for (;;) {
      while (running < limit) {
        const i = loop.next();
        if (i < 0) break;
        running++;
        let started: Promise<boolean>;
        try {
          const r = loop.start(i);
          started = typeof r === 'boolean' ? Promise.resolve(r) : r;
        } catch (error) {
          started = Promise.reject(error as Error);
        }
        started.then(
          (ok) => {
            loop.done(i, ok);
            settle();
          },
          (error: unknown) => {
            this.#fatal ??= error;
            settle();
          },
        );
      }
      if (running === 0) {
        if (loop.idle && (await loop.idle())) continue;
        break;
      }
      if (!woken) {
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
      woken = false;
    }
  }

  /** The innermost enclosing flow whose retry controller retries, if any (counting its attempt). */
  #flowRetryFor(i: number, error: unknown): Omit<FlowRetry, 'failure'> | undefined {
    const a = this.#c.atoms[i]!;
    for (let k = a.path.length - 1; k >= 0; k--) {
      const scope = this.#c.scopes.get(a.path[k]!);
      if (!scope) continue;
      const attempt = (this.#flowAttempts.get(scope.name) ?? 0) + 1;
      const d = scope.retry.onFailure({ task: scope.name, attempt, error });
      if (d.action === 'revertAll') return undefined;
      if (d.action === 'revert') continue;
      // Tasks outside the flow that already used its results would make reverting it unsound.
      for (let j = scope.lo; j < scope.hi; j++) {
        for (const s of this.#c.atoms[j]!.succs) {
          if ((s < scope.lo || s >= scope.hi) && this.#states[s] !== 'PENDING') return undefined;
        }
      }
      this.#flowAttempts.set(scope.name, attempt);
      return { name: scope.name, lo: scope.lo, hi: scope.hi, attempt, delayMs: d.delayMs ?? 0 };
    }
    return undefined;
  }

  /** Reverts a flow's completed tasks (reverse completion order) and makes all its tasks PENDING again. */
  async #retryFlow(scope: FlowRetry): Promise<void> {
    const done: number[] = [];
    for (let j = scope.lo; j < scope.hi; j++) {
      const state = this.#states[j];
      if (state === 'SUCCESS' || state === 'REVERTING') done.push(j);
    }
    done.sort((x, y) => this.#completedAt[y]! - this.#completedAt[x]!);
    for (const j of done) {
      if (!(await this.#revertAtom(j, scope.failure))) {
        this.#failures.push(scope.failure);
        return;
      }
    }
    this.#logger.debug({ flowId: this.flowId, flow: scope.name }, 'retrying flow');
    for (let j = scope.lo; j < scope.hi; j++) {
      if (this.#states[j] !== 'PENDING') {
        // A new attempt of the flow gives each task a fresh count (and its controller its whole
        // budget and first parameter set): PENDING is logged with attempt 0.
        this.#attempts[j] = 0;
        await this.#transition(j, 'PENDING');
      }
      this.#completedAt[j] = 0;
    }
    if (scope.delayMs) {
      try {
        await this.#clock.sleep(scope.delayMs, { signal: this.#controller.signal });
      } catch {
        // Cancelled while waiting: the forward loop sees the stop.
        return;
      }
    }
    // The next attempt starts (its number is durable before any of its tasks runs).
    const next = scope.attempt + 1;
    await this.#write({
      seq: ++this.seq,
      task: scope.name,
      subflow: true,
      state: 'RUNNING',
      attempt: next,
      at: this.#clock.now(),
      token: this.#token,
    });
    this.#flowCurrent.set(scope.name, next);
  }

  /** Parameters of atom `i`: those of its enclosing flows' controllers for their current attempts, then its own. */
  #paramsOf(i: number, own: JsonObject | undefined): JsonObject | undefined {
    if (this.#c.scopes.size === 0) return own;
    let out: JsonObject | undefined;
    for (const name of this.#c.atoms[i]!.path) {
      const scope = this.#c.scopes.get(name);
      const p = scope?.retry.paramsFor?.(this.#flowCurrent.get(name) ?? 1);
      if (p) out = { ...out, ...p };
    }
    return out === undefined ? own : own === undefined ? out : { ...out, ...own };
  }

  /**
   * Runs atom `i`. The hot path — RUNNING, a synchronous JSON result, SUCCESS, on a log whose
   * writes are already durable when `append` returns (the memory log) — is synchronous: no
   * promise, await or closure per task, which is what keeps the cost per task flat as runs grow.
   * Anything else (a pending write, a promise from the task, a failure, a result to check
   * further) continues asynchronously.
   */
  #runAtom(i: number): boolean | Promise<boolean> {
    const t = this.#c.atoms[i]!.task;
    const attempt = this.#attempts[i]! + 1;
    this.#attempts[i] = attempt;
    const params = this.#paramsOf(i, t.retry?.paramsFor?.(attempt));
    const running = this.#entryOf(i, 'RUNNING', false, undefined, undefined);
    const written = this.#write(running);
    if (written !== SETTLED) return this.#runAfter(written, i, running, attempt, params);
    this.#applied(i, running, false, undefined);
    return this.#executeAtom(i, attempt, params);
  }

  async #runAfter(
    written: Promise<void>,
    i: number,
    running: LogEntry,
    attempt: number,
    params: JsonObject | undefined,
  ): Promise<boolean> {
    await written;
    this.#applied(i, running, false, undefined);
    return this.#executeAtom(i, attempt, params);
  }

  /** First attempt of atom `i` (RUNNING is durable). */
  #executeAtom(
    i: number,
    attempt: number,
    params: JsonObject | undefined,
  ): boolean | Promise<boolean> {
    const t = this.#c.atoms[i]!.task;
    let result: unknown;
    try {
      result = t.execute(this.#ctx(i, this.#controller.signal, params), this.#inputsFor(i, params));
    } catch (error) {
      return this.#attemptLoop(i, attempt, params, { threw: true, value: error });
    }
    if (result === undefined) result = null;
    if (isThenable(result) || Array.isArray(t.provides) || whyNotJson(result) !== undefined) {
      return this.#attemptLoop(i, attempt, params, { threw: false, value: result });
    }
    this.#bind(i, result);
    const success = this.#entryOf(i, 'SUCCESS', true, result, undefined);
    const written = this.#write(success);
    if (written !== SETTLED) return this.#succeededAfter(written, i, success, result);
    this.#succeeded(i, success, result);
    return true;
  }

  async #succeededAfter(
    written: Promise<void>,
    i: number,
    success: LogEntry,
    result: unknown,
  ): Promise<boolean> {
    await written;
    this.#succeeded(i, success, result);
    return true;
  }

  #succeeded(i: number, success: LogEntry, result: unknown): void {
    this.#applied(i, success, true, result);
    this.#completedAt[i] = ++this.#completedCount;
  }

  /** Attempts of atom `i` from the outcome of its first `execute` call (retries included). */
  async #attemptLoop(
    i: number,
    attempt: number,
    params: JsonObject | undefined,
    first: { threw: boolean; value: unknown } | undefined,
  ): Promise<boolean> {
    const a = this.#c.atoms[i]!;
    const t = a.task;
    const signal = this.#controller.signal;
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
        } else result = t.execute(this.#ctx(i, signal, params), this.#inputsFor(i, params));
        if (isThenable(result)) result = await result;
        ok = true;
      } catch (e) {
        error = e;
      }
      if (ok) {
        if (result === undefined) result = null;
        const why = whyNotJson(result);
        let bad: Error | undefined;
        if (why) {
          bad = new TasksError(
            'tasks.result_not_serializable',
            `task '${a.name}' returned a value that is not JSON: ${why}`,
            {
              details: { task: a.name, reason: why },
            },
          );
        } else if (Array.isArray(t.provides) && (typeof result !== 'object' || result === null)) {
          bad = new TypeError(
            `task '${a.name}' provides ${JSON.stringify(t.provides)} but returned ${JSON.stringify(result)}, not an object`,
          );
        }
        if (!bad) {
          this.#bind(i, result);
          const success = this.#entryOf(i, 'SUCCESS', true, result, undefined);
          await this.#write(success);
          this.#applied(i, success, true, result);
          this.#completedAt[i] = ++this.#completedCount;
          return true;
        }
        const failure = failureOf(a.name, bad);
        await this.#transition(i, 'FAILURE', { failure });
        this.#failures.push(failure);
        return false;
      }
      const failure = failureOf(a.name, error);
      if (signal.aborted) {
        await this.#transition(i, 'CANCELLED', { failure });
        return false;
      }
      const decision = t.retry
        ? t.retry.onFailure({ task: a.name, attempt, error })
        : { action: 'revert' as const };
      if (decision.action === 'retry' && this.#stop === undefined) {
        await this.#transition(i, 'RETRYING', { failure });
        try {
          if (decision.delayMs) await this.#clock.sleep(decision.delayMs, { signal });
        } catch (e) {
          await this.#transition(i, 'CANCELLED', { failure: failureOf(a.name, e) });
          return false;
        }
        attempt = this.#attempts[i] = attempt + 1;
        params = this.#paramsOf(i, decision.params ?? t.retry?.paramsFor?.(attempt));
        await this.#transition(i, 'RUNNING');
        continue;
      }
      const scope = decision.action === 'revertAll' ? undefined : this.#flowRetryFor(i, error);
      if (scope && this.#flowRetry === undefined) {
        // The task will run again with its flow: RETRYING (not FAILURE), so a resume re-runs it.
        // The flow's failed attempt is logged with it, atomically: a resume continues the count.
        await this.#transition(i, 'RETRYING', { failure }, [
          {
            seq: 0,
            task: scope.name,
            subflow: true,
            state: 'RETRYING',
            attempt: scope.attempt,
            failure,
            at: 0,
            token: this.#token,
          },
        ]);
        this.#flowRetry = { ...scope, failure };
        return false;
      }
      await this.#transition(i, 'FAILURE', { failure });
      this.#failures.push(failure);
      return false;
    }
  }

  /** Reverts every completed task: reverse order of completion (reverse topological with concurrency). */
  async #revertAll(): Promise<void> {
    const { atoms } = this.#c;
    const states = this.#states;
    const pos = this.#completedAt;
    const todo = (i: number) =>
      states[i] === 'SUCCESS' || states[i] === 'REVERTING' || states[i] === 'REVERT_FAILURE';
    const pending = new Int32Array(atoms.length);
    const ready = new MinHeap((i) => -pos[i]!);
    for (const a of atoms) {
      if (!todo(a.index)) continue;
      let d = 0;
      for (const s of a.succs) if (todo(s)) d++;
      pending[a.index] = d;
      if (d === 0) ready.push(a.index);
    }
    const tolerant = this.#engine.internals.mode === 'tolerant';
    let failed = false;
    await this.#pump({
      next: () =>
        ready.size > 0 &&
        (this.#stop === undefined || this.#stop === 'cancel') &&
        this.#fatal === undefined &&
        (tolerant || !failed)
          ? ready.pop()
          : -1,
      start: (i) => this.#revertAtom(i),
      done: (i, ok) => {
        if (!ok) failed = true;
        if (ok || tolerant) {
          for (const p of atoms[i]!.preds) if (todo(p) && --pending[p]! === 0) ready.push(p);
        }
      },
    });
    if (failed && !tolerant) {
      // Stopped at the first failed revert: report what is left to revert.
      for (const i of this.#c.order)
        if (states[i] === 'SUCCESS') this.#outcome({ task: atoms[i]!.name, state: 'PENDING' });
    }
    if (this.#fatal === undefined && this.#stop === 'suspend') await this.#suspended();
  }

  async #revertAtom(i: number, cause: TaskFailure | undefined = this.#cause): Promise<boolean> {
    const a = this.#c.atoms[i]!;
    const t = a.task;
    if (t.revert) {
      await this.#transition(i, 'REVERTING');
      try {
        const stored = reveal(this.#results[i] as Json, this.#engine.internals.key);
        const params = this.#paramsOf(i, t.retry?.paramsFor?.(this.#attempts[i]!));
        await t.revert(this.#ctx(i, this.#revertController.signal, params), {
          result: stored.ok ? stored.value : REDACTED,
          failure: cause,
          inputs: this.#inputsFor(i, params),
        });
      } catch (error) {
        const failure = failureOf(a.name, error);
        await this.#transition(i, 'REVERT_FAILURE', { failure });
        this.#outcome({ task: a.name, state: 'REVERT_FAILURE', failure });
        return false;
      }
    }
    await this.#transition(i, 'REVERTED');
    this.#outcome({ task: a.name, state: 'REVERTED' });
    return true;
  }
}

export type { FlowRun };
