import type { Json, JsonObject } from '@rigging/core';
import { TasksError, type TaskFailure } from './errors.js';

/** States of a task, as recorded in the log and emitted as events. */
export type TaskState =
  | 'PENDING'
  | 'RUNNING'
  | 'SUCCESS'
  | 'FAILURE'
  | 'REVERTING'
  | 'REVERTED'
  | 'REVERT_FAILURE'
  | 'RETRYING'
  | 'SUSPENDED'
  | 'CANCELLED';

/** States of a flow (same vocabulary). */
export type FlowState = TaskState;

/** The shape of a flow definition, recorded when a flow starts (for upgrade checks). */
export interface FlowDefinition {
  flow: string;
  version: string;
  /** Every task in topological order. */
  tasks: { name: string; version: string }[];
}

/** The stored record of one flow. */
export interface FlowRecord {
  flowId: string;
  name: string;
  state: FlowState;
  definition: FlowDefinition;
  /** The flow inputs (sensitive ones redacted or encrypted). */
  inputs: JsonObject;
  /** The highest fencing token that wrote to this flow, if any. */
  token: bigint | null;
  createdAt: number;
  /** Time of the last write; SQL logs may only move it on flow-level transitions. */
  updatedAt: number;
}

/** One transition in the log. `task` is `null` for a transition of the flow itself. */
export interface LogEntry {
  /** Position in the flow's log, from 1. */
  seq: number;
  task: string | null;
  state: TaskState;
  /** Attempt number of the task (from 1; 0 on the `PENDING` entry that resets a task when its flow is retried). */
  attempt?: number;
  /** The task's result (on SUCCESS; sensitive results redacted or encrypted). */
  result?: Json;
  failure?: TaskFailure;
  /** The fencing token of the writer, when it held a lease. */
  token?: bigint | null;
  /**
   * True when `task` names a sub-flow with a retry controller rather than a task: `RETRYING` when
   * its attempt `attempt` failed and it will be reverted and run again, `RUNNING` when attempt
   * `attempt` starts. A resume continues the flow's attempt count from these entries.
   */
  subflow?: true;
  /** Epoch milliseconds. */
  at: number;
}

/** Summary of a flow for listings. */
export interface FlowSummary {
  flowId: string;
  name: string;
  state: FlowState;
  createdAt: number;
  updatedAt: number;
}

/**
 * Where an engine records flows. Every method resolves only once its write is durable (for the
 * backend's meaning of durable). Writes with a fencing token lower than one already recorded for
 * the flow are refused with `tasks.fenced`.
 */
export interface TaskLog {
  /** Records a new flow and its first entries; `tasks.flow_exists` if the id is taken. */
  create(record: FlowRecord, entries: LogEntry[]): Promise<void>;
  /** Appends entries and optionally sets the flow's state, atomically. */
  append(
    flowId: string,
    entries: LogEntry[],
    update: { state?: FlowState; token?: bigint | null },
  ): Promise<void>;
  /** The flow and its whole log, in `seq` order; `undefined` when unknown. */
  load(flowId: string): Promise<{ record: FlowRecord; entries: LogEntry[] } | undefined>;
  /** The audit trail of a flow, in `seq` order (empty when unknown). */
  history(flowId: string): Promise<LogEntry[]>;
  /** Flows, newest first, optionally in given states. */
  flows(options?: { states?: readonly FlowState[]; limit?: number }): Promise<FlowSummary[]>;
  /** Deletes a flow and its log (for retention). */
  remove(flowId: string): Promise<void>;
}

export function fenced(
  flowId: string,
  token: bigint | null | undefined,
  stored: bigint | null,
): TasksError {
  return new TasksError(
    'tasks.fenced',
    `write to flow ${flowId} refused: fencing token ${String(token)} is older than ${String(stored)}; another owner took over`,
    { details: { flowId, token: String(token), stored: String(stored) } },
  );
}

export function notFound(flowId: string): TasksError {
  return new TasksError('tasks.flow_not_found', `no flow ${flowId} in the task log`, {
    details: { flowId },
  });
}

export function flowExists(flowId: string): TasksError {
  return new TasksError(
    'tasks.flow_exists',
    `flow ${flowId} already exists in the task log; resume it instead`,
    {
      details: { flowId },
    },
  );
}

/** Every task and flow state, in a fixed order (e.g. to validate a state given as input). */
export const taskStates: readonly TaskState[] = Object.freeze([
  'PENDING',
  'RUNNING',
  'SUCCESS',
  'FAILURE',
  'REVERTING',
  'REVERTED',
  'REVERT_FAILURE',
  'RETRYING',
  'SUSPENDED',
  'CANCELLED',
]);
const STATE_INDEX = new Map<unknown, number>(taskStates.map((s, i) => [s, i]));

const HAS_ATTEMPT = 1;
const HAS_TOKEN = 2; // `token: null`
const HAS_RESULT = 4; // in `values[ref]`
const HAS_FAILURE = 8; // in `values[ref]`
const SUBFLOW = 16;
const WHOLE = 32; // an entry of another shape, kept as given in `values[ref]`
const NULL_RESULT = 64; // `result: null` (with HAS_RESULT; nothing in `values`)

/**
 * The entries of one flow, stored column by column: the numbers in typed arrays (outside the
 * JavaScript heap, so the garbage collector neither copies nor scans them), one string reference
 * per entry for the task, and only results and failures as objects. `history()` and `load()`
 * build the same `LogEntry` objects on demand (same keys, same order as the engine writes them).
 * A run that keeps a long log therefore keeps few objects alive: GC work per task stays flat.
 */
class EntryColumns {
  length = 0;
  #seq = new Float64Array(16);
  #at = new Float64Array(16);
  #attempt = new Int32Array(16);
  #ref = new Int32Array(16);
  #state = new Uint8Array(16);
  #flags = new Uint8Array(16);
  readonly #task: (string | null)[] = [];
  readonly #values: unknown[] = [];

  get lastSeq(): number {
    return this.length ? this.#seq[this.length - 1]! : 0;
  }

  push(e: LogEntry): void {
    const k = this.length;
    if (k === this.#seq.length) this.#grow();
    this.#seq[k] = e.seq;
    this.#at[k] = e.at;
    this.length = k + 1;
    let flags = 0;
    let keys = 0;
    let known = 3; // seq, task, state
    const state = STATE_INDEX.get(e.state);
    const { attempt, token, result, failure, subflow } = e;
    if (attempt !== undefined) {
      flags |= HAS_ATTEMPT;
      known++;
    }
    if (token === null) {
      flags |= HAS_TOKEN;
      known++;
    }
    if (result !== undefined) {
      flags |= HAS_RESULT;
      known++;
    }
    if (failure !== undefined) {
      flags |= HAS_FAILURE;
      known++;
    }
    if (subflow === true) {
      flags |= SUBFLOW;
      known++;
    }
    if (e.at !== undefined) known++;
    for (const _ in e) keys++;
    if (
      keys !== known ||
      state === undefined ||
      typeof e.seq !== 'number' ||
      typeof e.at !== 'number' ||
      (e.task !== null && typeof e.task !== 'string') ||
      (subflow !== undefined && subflow !== true) ||
      (token !== undefined && token !== null) ||
      (attempt !== undefined && ((attempt | 0) !== attempt || Object.is(attempt, -0))) ||
      (result !== undefined && failure !== undefined)
    ) {
      // Not a shape stored column-wise: kept whole.
      this.#flags[k] = WHOLE;
      this.#ref[k] = this.#values.push(e) - 1;
      this.#task.push(null);
      return;
    }
    this.#state[k] = state;
    this.#attempt[k] = attempt ?? 0;
    if (result === null) flags |= NULL_RESULT;
    this.#flags[k] = flags;
    this.#ref[k] =
      result === null
        ? -1
        : result !== undefined
          ? this.#values.push(result) - 1
          : failure !== undefined
            ? this.#values.push(failure) - 1
            : -1;
    this.#task.push(e.task);
  }

  /** Entry `k`, as it was appended. */
  at(k: number): LogEntry {
    const flags = this.#flags[k]!;
    if (flags & WHOLE) return this.#values[this.#ref[k]!] as LogEntry;
    const e = { seq: this.#seq[k]!, task: this.#task[k]! } as LogEntry;
    const subflow = (flags & SUBFLOW) !== 0;
    if (subflow) e.subflow = true;
    e.state = taskStates[this.#state[k]!]!;
    if (flags & HAS_ATTEMPT) e.attempt = this.#attempt[k]!;
    if (subflow && flags & HAS_FAILURE) e.failure = this.#values[this.#ref[k]!] as TaskFailure;
    e.at = this.#at[k]!;
    if (flags & HAS_TOKEN) e.token = null;
    if (flags & HAS_RESULT)
      e.result = flags & NULL_RESULT ? null : (this.#values[this.#ref[k]!] as Json);
    if (!subflow && flags & HAS_FAILURE) e.failure = this.#values[this.#ref[k]!] as TaskFailure;
    return e;
  }

  all(): LogEntry[] {
    const out = new Array<LogEntry>(this.length);
    for (let k = 0; k < this.length; k++) out[k] = this.at(k);
    return out;
  }

  #grow(): void {
    const n = this.#seq.length * 2;
    const seq = new Float64Array(n);
    seq.set(this.#seq);
    this.#seq = seq;
    const at = new Float64Array(n);
    at.set(this.#at);
    this.#at = at;
    const attempt = new Int32Array(n);
    attempt.set(this.#attempt);
    this.#attempt = attempt;
    const ref = new Int32Array(n);
    ref.set(this.#ref);
    this.#ref = ref;
    const state = new Uint8Array(n);
    state.set(this.#state);
    this.#state = state;
    const flags = new Uint8Array(n);
    flags.set(this.#flags);
    this.#flags = flags;
  }
}

interface MemoryFlow {
  record: FlowRecord;
  entries: EntryColumns;
}

/**
 * What the memory log's `append` returns: one settled promise, so that the engine can tell the
 * write is durable already and go on without waiting a tick (internal; not exported by the package).
 */
export const SETTLED: Promise<void> = Promise.resolve();

/** A task log in this process's memory (lost with it): the default, and the fastest. */
export function memoryLog(): TaskLog {
  const flows = new Map<string, MemoryFlow>();
  const check = (flowId: string, token: bigint | null | undefined): MemoryFlow => {
    const f = flows.get(flowId);
    if (!f) throw notFound(flowId);
    const stored = f.record.token;
    if (token != null && stored != null && token < stored) throw fenced(flowId, token, stored);
    return f;
  };
  return {
    async create(record, entries) {
      if (flows.has(record.flowId)) throw flowExists(record.flowId);
      const columns = new EntryColumns();
      for (const e of entries) columns.push(e);
      flows.set(record.flowId, { record: { ...record }, entries: columns });
    },
    // Not `async`: an append is synchronous here, so it returns one shared settled promise.
    append(flowId, entries, update) {
      try {
        const f = check(flowId, update.token);
        const last = f.entries.lastSeq;
        if (entries.length && entries[0]!.seq <= last) {
          throw new TasksError(
            'tasks.fenced',
            `flow ${flowId}: log position ${entries[0]!.seq} already written by another engine`,
            {
              details: { flowId, seq: entries[0]!.seq },
            },
          );
        }
        for (let k = 0; k < entries.length; k++) f.entries.push(entries[k]!);
        if (update.token != null) f.record.token = update.token;
        if (update.state) f.record.state = update.state;
        f.record.updatedAt = entries.length ? entries[entries.length - 1]!.at : f.record.updatedAt;
        return SETTLED;
      } catch (error) {
        return Promise.reject(error as Error);
      }
    },
    async load(flowId) {
      const f = flows.get(flowId);
      return f && { record: { ...f.record }, entries: f.entries.all() };
    },
    async history(flowId) {
      return flows.get(flowId)?.entries.all() ?? [];
    },
    async flows(options = {}) {
      const states = options.states && new Set(options.states);
      const out: FlowSummary[] = [];
      for (const { record: r } of flows.values()) {
        if (states && !states.has(r.state)) continue;
        out.push({
          flowId: r.flowId,
          name: r.name,
          state: r.state,
          createdAt: r.createdAt,
          updatedAt: r.updatedAt,
        });
      }
      out.sort((a, b) => b.createdAt - a.createdAt);
      return options.limit === undefined ? out : out.slice(0, options.limit);
    },
    async remove(flowId) {
      flows.delete(flowId);
    },
  };
}
