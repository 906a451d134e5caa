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

interface MemoryFlow {
  record: FlowRecord;
  entries: LogEntry[];
}

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
      flows.set(record.flowId, { record: { ...record }, entries: [...entries] });
    },
    async append(flowId, entries, update) {
      const f = check(flowId, update.token);
      const last = f.entries.length ? f.entries[f.entries.length - 1]!.seq : 0;
      if (entries.length && entries[0]!.seq <= last) {
        throw new TasksError(
          'tasks.fenced',
          `flow ${flowId}: log position ${entries[0]!.seq} already written by another engine`,
          {
            details: { flowId, seq: entries[0]!.seq },
          },
        );
      }
      for (const e of entries) f.entries.push(e);
      if (update.token != null) f.record.token = update.token;
      if (update.state) f.record.state = update.state;
      f.record.updatedAt = entries.length ? entries[entries.length - 1]!.at : f.record.updatedAt;
    },
    async load(flowId) {
      const f = flows.get(flowId);
      return f && { record: { ...f.record }, entries: [...f.entries] };
    },
    async history(flowId) {
      return [...(flows.get(flowId)?.entries ?? [])];
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
