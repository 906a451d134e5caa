import { randomUUID } from 'node:crypto';
import {
  explainNotJson,
  positiveIntegerOption,
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
import { TasksError } from './errors.js';
import type { EngineEvents } from './events.js';
import { compile, validateFlow, type CompiledFlow, type Flow, type Node } from './flow.js';
import { FlowRun } from './flow-run.js';
import {
  memoryLog,
  notFound,
  type FlowDefinition,
  type FlowState,
  type FlowSummary,
  type LogEntry,
  type TaskLog,
} from './log.js';
import { Recovery, type RecoveryOptions } from './recovery.js';
import { runOrResume } from './run-or-resume.js';
import type {
  Incompatibility,
  MigrateHook,
  ResumeOptions,
  RunOptions,
  RunOrResumeOptions,
} from './engine-types.js';
import { checkKey, protect, reveal } from './secrets.js';
import type { Task } from './task.js';

export type { EngineEvents, FlowStateEvent, TaskStateEvent } from './events.js';
export type {
  FlowEngine,
  Incompatibility,
  MigrateDecision,
  MigrateHook,
  ResumeOptions,
  RunOptions,
  RunOrResumeOptions,
} from './engine-types.js';

/** Options of {@link Engine}. */
export interface EngineOptions {
  /** Where transitions are recorded. @default memoryLog() */
  log?: TaskLog;
  /** When given, a flow runs only while its engine holds the flow's lease (fencing token recorded on every write). */
  locks?: LockProvider;
  /** Tasks run (and are reverted) in parallel up to this many. @default 1 */
  concurrency?: number;
  /** Where the engine logs; tasks get a child bound to `flowId` and `task`. @default silentLogger */
  logger?: Logger;
  /** The clock of event timestamps, log records and retry delays. @default systemClock */
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

function major(v: string): string {
  const i = v.indexOf('.');
  return i < 0 ? v : v.slice(0, i);
}

// Caches. Both depend on the compiled flow alone: computed once per flow, not once per run (a run
// of n tasks would otherwise allocate and walk n more objects before its first task). Bounded by
// the compiled flows alive: weakly keyed.
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

/**
 * Runs flows: tasks in dependency order (in parallel up to `concurrency`), every transition made
 * durable in the log before the next task starts; on failure, completed tasks are reverted in
 * reverse dependency order: a task is reverted only once every completed task depending on it
 * was, at most `concurrency` at once. With `concurrency: 1` that is the exact reverse order of
 * completion; with more, independent branches are reverted in parallel.
 */
export class Engine extends TypedEmitter<EngineEvents> {
  /** Where transitions are recorded (the `log` option, or a fresh in-memory log). */
  readonly log: TaskLog;
  /** Tasks run (and are reverted) in parallel up to this many (the `concurrency` option, default 1). */
  readonly concurrency: number;
  readonly #locks: LockProvider | undefined;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #mode: 'stop' | 'tolerant';
  readonly #key: Uint8Array | undefined;
  readonly #prefix: string;
  /** Flow ids this engine owns now (reserved before their run exists). */
  readonly #owned = new Set<string>();
  /** The runs of owned flows, once created. */
  readonly #active = new Map<string, FlowRun>();

  constructor(options: EngineOptions = {}) {
    super();
    if (options === null || typeof options !== 'object')
      throw new TypeError('Engine options must be an object');
    const concurrency = positiveIntegerOption('Engine', 'concurrency', options.concurrency, 1);
    const mode = options.onRevertFailure ?? 'stop';
    if (mode !== 'stop' && mode !== 'tolerant') {
      throw new TypeError(`onRevertFailure must be 'stop' or 'tolerant', got ${String(mode)}`);
    }
    this.log = options.log ?? memoryLog();
    this.concurrency = concurrency;
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
    this.#checkTransactions(compiled);
    const flowId = options.flowId ?? randomUUID();
    if (typeof flowId !== 'string' || !flowId || flowId.length > 190) {
      throw new TypeError(
        `flowId must be a non-empty string of at most 190 characters, got ${JSON.stringify(flowId)}`,
      );
    }
    options.signal?.throwIfAborted();
    const symbols = sensitiveSymbols(compiled);
    const storedInputs: JsonObject = {};
    for (const [symbol, value] of Object.entries(inputs)) {
      if (symbols.has(symbol)) storedInputs[symbol] = protect(value, this.#key);
      else {
        const why = explainNotJson(value, `inputs.${symbol}`);
        if (why) {
          throw new TasksError(
            'tasks.result_not_serializable',
            `flow input '${symbol}' is not JSON: ${why}`,
            { details: { input: symbol, reason: why } },
          );
        }
        storedInputs[symbol] = value as Json;
      }
    }
    return this.#own(flowId, options.lease, async (lease) => {
      const run = this.#start(compiled, flowId, lease, options.signal, symbols, inputs);
      run.create(definitionOf(compiled), storedInputs);
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
    this.#checkTransactions(compiled);
    options.signal?.throwIfAborted();
    return this.#own(flowId, options.lease, async (lease) => {
      const loaded = await this.log.load(flowId);
      if (!loaded) throw notFound(flowId);
      const symbols = sensitiveSymbols(compiled);
      const rename = checkCompatible(
        loaded.record.definition,
        definitionOf(compiled),
        options.migrate,
        flowId,
      );
      const inputs: Record<string, unknown> = {};
      for (const [symbol, stored] of Object.entries(loaded.record.inputs)) {
        const revealed = reveal(stored, this.#key);
        if (revealed.ok) inputs[symbol] = revealed.value;
      }
      Object.assign(inputs, options.inputs ?? {});
      const run = this.#start(compiled, flowId, lease, options.signal, symbols, inputs);
      run.restore(loaded.entries, rename);
      return (await run.continue(loaded.record.state)) as O;
    });
  }

  /**
   * Runs `flow` as `options.flowId`, or resumes it when the log already has it (completed tasks
   * are not run again; a changed definition fails with `tasks.incompatible_log` as in `resume`).
   * Waits instead of failing while another owner holds the flow (`tasks.flow_busy`: a dead
   * owner's lease not expired yet, a live one still running it) and after a lost connection to
   * the log (as the log's `isConnectionLoss` tells it), then tries again; resumes at once when
   * another creator won the race (`tasks.flow_exists`). `options.signal` ends the waiting and
   * suspends the flow if it runs here (`tasks.suspended`, resumable; nothing is reverted);
   * `options.cancel` cancels and reverts it as `run({ signal })` does.
   */
  runOrResume<I, O>(flow: Flow<I, O> | Task<I, O>, options: RunOrResumeOptions<I>): Promise<O> {
    return runOrResume(
      { engine: this, clock: this.#clock, logger: this.#logger },
      flow as Flow | Task,
      options as RunOrResumeOptions<unknown>,
    ) as Promise<O>;
  }

  /**
   * Resumes, by itself, the unfinished flows of the log whose owner is gone: a scan of the log at
   * start, then one every `intervalMs` (on the engine's clock), at most `concurrency` resumes at
   * once. A flow whose lease another engine holds is left to it (`busy`) and tried again at a
   * later scan; with no `locks`, the engine cannot tell a live owner from a dead one and resumes
   * every listed flow it is not running itself (use it so only when it is the only engine on its
   * log). A changed definition is refused as `resume` refuses it, reported once as
   * `recovery:refused`, and the other flows go on. Stop it with `stop()` or `await using`.
   */
  startRecovery(options: RecoveryOptions): Recovery {
    return new Recovery({ engine: this, clock: this.#clock, logger: this.#logger }, options);
  }

  /** Asks a flow running in this engine to stop at the next task boundary (resumable later). Resolves once it stopped; `false` if it was not running here. */
  async suspend(flowId: string): Promise<boolean> {
    const run = this.#active.get(flowId);
    if (!run) return false;
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
    return [...this.#owned];
  }

  /** `tasks.transaction_unsupported` when a task of `compiled` needs transactions the log does not offer. */
  #checkTransactions(compiled: CompiledFlow): void {
    if (this.log.transaction !== undefined) return;
    const atom = compiled.atoms.find((a) => a.task.transaction);
    if (atom === undefined) return;
    throw new TasksError(
      'tasks.transaction_unsupported',
      `task '${atom.name}' runs in a transaction of the task log (transaction: true), but this engine's log offers none: use sqlLog(database) from @rigging/tasks/sql`,
      { details: { task: atom.name } },
    );
  }

  /** A run of `compiled` as `flowId` with `inputs`, given this engine's settings; active until its flow is released. */
  #start(
    compiled: CompiledFlow,
    flowId: string,
    lease: Lease | undefined,
    signal: AbortSignal | undefined,
    symbols: ReadonlySet<string>,
    inputs: Readonly<Record<string, unknown>>,
  ): FlowRun {
    const run = new FlowRun(
      {
        log: this.log,
        concurrency: this.concurrency,
        logger: this.#logger,
        clock: this.#clock,
        onRevertFailure: this.#mode,
        key: this.#key,
        events: this,
        compiled,
        flowId,
        lease,
        taskLease: lease && Object.freeze({ key: lease.key, token: lease.token, lost: lease.lost }),
        signal,
        symbols,
      },
      inputs,
    );
    this.#active.set(flowId, run);
    return run;
  }

  /**
   * Runs `body` as the flow's only owner in this engine, under `held` (a caller's lease, never
   * released here) or else the engine's own lock on the flow (when it has `locks`).
   */
  async #own<T>(
    flowId: string,
    held: Lease | undefined,
    body: (lease: Lease | undefined) => Promise<T>,
  ): Promise<T> {
    if (held !== undefined) checkLease(held);
    if (this.#owned.has(flowId)) {
      throw new TasksError('tasks.flow_busy', `flow ${flowId} is already running in this engine`, {
        details: { flowId },
      });
    }
    let lease = held;
    if (!lease && this.#locks) {
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
    // Reserve the id synchronously: a second run of it is refused from here on.
    this.#owned.add(flowId);
    try {
      return await body(lease);
    } finally {
      this.#owned.delete(flowId);
      this.#active.delete(flowId);
      if (lease !== held) {
        await lease
          ?.release()
          .catch((err: unknown) =>
            this.#logger.warn({ err, flowId }, 'releasing flow lease failed'),
          );
      }
    }
  }
}

/** A caller's lease must carry a fencing token and a `lost` signal. */
function checkLease(lease: Lease): void {
  if (
    typeof lease !== 'object' ||
    lease === null ||
    typeof lease.token !== 'bigint' ||
    !(lease.lost instanceof AbortSignal)
  ) {
    throw new TypeError('options.lease must be a Lease: a bigint token and a lost AbortSignal');
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
