import { nonNegativeIntegerOption } from '@rigging/core';
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
  /** The root flow's name. */
  flow: string;
  /** The root flow's version. */
  version: string;
  /** Every task in topological order. */
  tasks: {
    /** The task's name. */
    name: string;
    /** The task's version. */
    version: string;
  }[];
}

/** The stored record of one flow. */
export interface FlowRecord {
  /** The flow run's id. */
  flowId: string;
  /** The root flow's name. */
  name: string;
  /** The flow's current state. */
  state: FlowState;
  /** The flow's shape when it started (checked on resume). */
  definition: FlowDefinition;
  /** The flow inputs (sensitive ones redacted or encrypted). */
  inputs: JsonObject;
  /** The highest fencing token that wrote to this flow, if any. */
  token: bigint | null;
  /** Epoch milliseconds at which the flow started. */
  createdAt: number;
  /** Time of the last write; SQL logs may only move it on flow-level transitions. */
  updatedAt: number;
}

/** One transition in the log. `task` is `null` for a transition of the flow itself. */
export interface LogEntry {
  /** Position in the flow's log, from 1. */
  seq: number;
  /** The task (or retried sub-flow) name; `null` for the flow itself. */
  task: string | null;
  /** The state entered. */
  state: TaskState;
  /** Attempt number of the task (from 1; 0 on the `PENDING` entry that resets a task when its flow is retried). */
  attempt?: number;
  /** The task's result (on SUCCESS; sensitive results redacted or encrypted). */
  result?: Json;
  /** The error (on FAILURE, RETRYING, CANCELLED and REVERT_FAILURE; the rollback's cause on flow entries). */
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
  /** The flow run's id. */
  flowId: string;
  /** The root flow's name. */
  name: string;
  /** The flow's current state. */
  state: FlowState;
  /** Epoch milliseconds at which the flow started. */
  createdAt: number;
  /** Epoch milliseconds of the last write (see {@link FlowRecord.updatedAt}). */
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
  load(flowId: string): Promise<
    | {
        /** The flow's record. */
        record: FlowRecord;
        /** Every entry of the flow, in `seq` order. */
        entries: LogEntry[];
      }
    | undefined
  >;
  /** The audit trail of a flow, in `seq` order (empty when unknown). */
  history(flowId: string): Promise<LogEntry[]>;
  /** Flows, newest first, optionally in given states. */
  flows(options?: { states?: readonly FlowState[]; limit?: number }): Promise<FlowSummary[]>;
  /** Deletes a flow and its log (for retention). */
  remove(flowId: string): Promise<void>;
  /**
   * Whether `error` (thrown by this log) means the connection to its store was lost: the flow can
   * be resumed on a new connection, and `runOrResume` waits and tries again. Optional: a log with
   * no connection to lose (the memory log) leaves it out.
   */
  isConnectionLoss?(error: unknown): boolean;
  /**
   * Runs `work` in one transaction of the log's store and writes what it returns in the same
   * transaction: the flow's creation when `create` is given, then `entries` (and `update`), fenced
   * as `append` is. The work's own writes and the log's commit together or not at all. Resolves
   * with `value` once committed. Optional: the engine refuses a task defined with
   * `transaction: true` on a log without it (`tasks.transaction_unsupported`).
   */
  transaction?<T>(
    flowId: string,
    work: (transaction: unknown) => Promise<TransactionWrite<T>>,
  ): Promise<T>;
}

/** What the work of {@link TaskLog.transaction} returns: its value and the log's writes. */
export interface TransactionWrite<T> {
  /** What `transaction` resolves with. */
  value: T;
  /** The new flow's record, created first (with `entries`) when the flow is new. */
  create?: FlowRecord | undefined;
  /** Entries appended (after the creation's, if any). */
  entries: LogEntry[];
  /** As `append`'s `update` (ignored with `create`, whose record holds the state). */
  update: { state?: FlowState; token?: bigint | null };
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

/** Entries per chunk of {@link EntryColumns} (the first chunk starts smaller and doubles up to it). */
const CHUNK_BITS = 10;
const CHUNK = 1 << CHUNK_BITS;
const CHUNK_MASK = CHUNK - 1;

/** The columns of up to {@link CHUNK} consecutive entries. */
class Chunk {
  readonly seq: Float64Array;
  readonly at: Float64Array;
  readonly attempt: Int32Array;
  readonly ref: Int32Array;
  readonly state: Uint8Array;
  readonly flags: Uint8Array;
  readonly task: (string | null)[];

  constructor(size: number, from?: Chunk) {
    this.seq = new Float64Array(size);
    this.at = new Float64Array(size);
    this.attempt = new Int32Array(size);
    this.ref = new Int32Array(size);
    this.state = new Uint8Array(size);
    this.flags = new Uint8Array(size);
    this.task = from ? from.task : [];
    if (from) {
      this.seq.set(from.seq);
      this.at.set(from.at);
      this.attempt.set(from.attempt);
      this.ref.set(from.ref);
      this.state.set(from.state);
      this.flags.set(from.flags);
    }
  }
}

/**
 * The entries of one flow, stored column by column: the numbers in typed arrays (outside the
 * JavaScript heap, so the garbage collector neither copies nor scans them), one string reference
 * per entry for the task, and only results and failures as objects. `history()` and `load()`
 * build the same `LogEntry` objects on demand (same keys, same order as the engine writes them).
 * A run that keeps a long log therefore keeps few objects alive: GC work per task stays flat.
 *
 * The columns are chunks of {@link CHUNK} entries (≈ 26 KiB of numbers each), never one array
 * regrown to the flow's size: a long flow's log is many small allocations, which the allocator
 * hands back and reuses, instead of a few large ones that it maps fresh from the kernel (and
 * page-faults in) for every flow — that made a 10,000-task run cost ≈ 2.5× per task what a
 * 1,000-task run did. Entry `k` is in chunk `k >> CHUNK_BITS`.
 */
class EntryColumns {
  length = 0;
  readonly #chunks: Chunk[] = [new Chunk(16)];
  readonly #values: unknown[] = [];

  get lastSeq(): number {
    const k = this.length - 1;
    return k < 0 ? 0 : this.#chunks[k >>> CHUNK_BITS]!.seq[k & CHUNK_MASK]!;
  }

  /** The chunk that takes entry `k` (the next one), made room for. */
  #room(k: number): Chunk {
    const c = k >>> CHUNK_BITS;
    let chunk = this.#chunks[c];
    if (chunk === undefined) {
      chunk = new Chunk(CHUNK);
      this.#chunks.push(chunk);
    } else if ((k & CHUNK_MASK) === chunk.seq.length) {
      // only the first chunk starts small: it doubles up to CHUNK entries
      chunk = this.#chunks[c] = new Chunk(chunk.seq.length * 2, chunk);
    }
    return chunk;
  }

  push(e: LogEntry): void {
    const k = this.length;
    const chunk = this.#room(k);
    const i = k & CHUNK_MASK;
    chunk.seq[i] = e.seq;
    chunk.at[i] = e.at;
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
      chunk.flags[i] = WHOLE;
      chunk.ref[i] = this.#values.push(e) - 1;
      chunk.task.push(null);
      return;
    }
    chunk.state[i] = state;
    chunk.attempt[i] = attempt ?? 0;
    if (result === null) flags |= NULL_RESULT;
    chunk.flags[i] = flags;
    chunk.ref[i] =
      result === null
        ? -1
        : result !== undefined
          ? this.#values.push(result) - 1
          : failure !== undefined
            ? this.#values.push(failure) - 1
            : -1;
    chunk.task.push(e.task);
  }

  /** Entry `k`, as it was appended. */
  at(k: number): LogEntry {
    const chunk = this.#chunks[k >>> CHUNK_BITS]!;
    const i = k & CHUNK_MASK;
    const flags = chunk.flags[i]!;
    if (flags & WHOLE) return this.#values[chunk.ref[i]!] as LogEntry;
    const e = { seq: chunk.seq[i]!, task: chunk.task[i]! } as LogEntry;
    const subflow = (flags & SUBFLOW) !== 0;
    if (subflow) e.subflow = true;
    e.state = taskStates[chunk.state[i]!]!;
    if (flags & HAS_ATTEMPT) e.attempt = chunk.attempt[i]!;
    if (subflow && flags & HAS_FAILURE) e.failure = this.#values[chunk.ref[i]!] as TaskFailure;
    e.at = chunk.at[i]!;
    if (flags & HAS_TOKEN) e.token = null;
    if (flags & HAS_RESULT)
      e.result = flags & NULL_RESULT ? null : (this.#values[chunk.ref[i]!] as Json);
    if (!subflow && flags & HAS_FAILURE) e.failure = this.#values[chunk.ref[i]!] as TaskFailure;
    return e;
  }

  all(): LogEntry[] {
    const out = new Array<LogEntry>(this.length);
    for (let k = 0; k < this.length; k++) out[k] = this.at(k);
    return out;
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
      const limit = nonNegativeIntegerOption('flows', 'limit', options.limit);
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
      return limit === undefined ? out : out.slice(0, limit);
    },
    async remove(flowId) {
      flows.delete(flowId);
    },
  };
}
