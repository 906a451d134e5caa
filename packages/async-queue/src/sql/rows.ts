// The rows of the SQL backend's two tables as drivers return them, and their public views.
import type { SerializedError } from '@rigging/core';
import type { Kysely } from '@rigging/sql';
import type { EnqueueInput } from '../backend.js';
import type { OpInfo, OpStatus } from '../types.js';
import { sql } from '../sql-peer.js';

/** The Kysely handle the backend queries through (its tables are not typed). @internal */
export type Db = Kysely<any>;

/**
 * `'queued'` written into the statement's text: PostgreSQL's index of ops by key is partial on
 * `status = 'queued'`, and a prepared statement's generic plan can use it only when the value is
 * in the text, not a parameter. @internal
 */
export const QUEUED = sql.lit('queued');

/** A row of `rigging_async_queue_ops` as drivers return it (bigints may come as strings). @internal */
export interface OpRow {
  id: string;
  queue: string;
  op_key: string;
  seq: number | string;
  type: string;
  payload: string;
  status: string;
  attempts: number | string;
  expiries: number | string;
  token: number | string;
  idempotency_key: string | null;
  result: string | null;
  error: string | null;
  cancelled_by: string | null;
  worker: string | null;
  announce: number | string;
  created_at: number | string;
  started_at: number | string | null;
  finished_at: number | string | null;
}

/** Every column of {@link OpRow}, in the table's order. @internal */
export const OP_COLUMNS = Object.keys({
  id: true,
  queue: true,
  op_key: true,
  seq: true,
  type: true,
  payload: true,
  status: true,
  attempts: true,
  expiries: true,
  token: true,
  idempotency_key: true,
  result: true,
  error: true,
  cancelled_by: true,
  worker: true,
  announce: true,
  created_at: true,
  started_at: true,
  finished_at: true,
} satisfies Record<keyof OpRow, true>) as readonly (keyof OpRow)[];

/** A row of `rigging_async_queue_keys`. @internal */
export interface KeyRow {
  queue: string;
  op_key: string;
  state: 'idle' | 'ready' | 'running' | 'blocked';
  next_seq: number | string;
  pending: number | string;
  avail_at: number | string;
  turn: number | string;
  running_op: string | null;
  running_type: string | null;
  token: number | string;
  lease_until: number | string;
  blocked_by: string | null;
  /** Seq of the key's last claimed op (no queued op below it); set by every claim. */
  head_seq?: number | string;
  /** The worker (and its owner tag) and start time of the running op's attempt. */
  running_worker?: string | null;
  running_since?: number | string | null;
}

/**
 * An op runs on its key's row: a claim writes the key row alone (the op's row stays `queued`
 * until the attempt ends), so the op of a running key row reads `running`, with the attempt under
 * way counted and its start time. `k` may be the key's columns as a join names them. @internal
 */
export function asRunning(
  row: OpRow,
  k: { state?: unknown; running_op?: unknown; running_since?: unknown } | undefined,
): OpRow {
  if (row.status !== 'queued' || k?.state !== 'running' || k.running_op !== row.id) return row;
  return {
    ...row,
    status: 'running',
    attempts: Number(row.attempts) + 1,
    started_at: (k.running_since as number | string | null | undefined) ?? null,
  };
}

/** The op of `row` as the claim made at `at` runs it (see {@link asRunning}). @internal */
export const claimedAt = (row: OpRow, at: number | string | null | undefined): OpRow =>
  asRunning(row, { state: 'running', running_op: row.id, running_since: at });

/** @internal */
export const num = (v: number | string | null | undefined): number | undefined =>
  v === null || v === undefined ? undefined : Number(v);

/** @internal */
export const parse = (text: string | null): unknown =>
  text === null ? undefined : JSON.parse(text);

/** The public view of an op row. @internal */
export function toInfo(row: OpRow, held = false): OpInfo {
  const info: OpInfo = {
    id: row.id,
    key: row.op_key,
    type: row.type,
    payload: parse(row.payload),
    status: row.status as OpStatus,
    attempts: Number(row.attempts),
    createdAt: Number(row.created_at),
    startedAt: num(row.started_at),
    finishedAt: num(row.finished_at),
    result: parse(row.result),
    error: parse(row.error) as SerializedError | undefined,
    cancelledBy: row.cancelled_by ?? undefined,
    idempotencyKey: row.idempotency_key ?? undefined,
  };
  if (held) info.held = true;
  return info;
}

/** The row of a newly enqueued op. @internal */
export const newOpRow = (
  name: string,
  id: string,
  input: EnqueueInput,
  seq: number,
  payload: string,
  at: number,
): OpRow => ({
  id,
  queue: name,
  op_key: input.key,
  seq,
  type: input.type,
  payload,
  status: 'queued',
  attempts: 0,
  expiries: 0,
  token: 0,
  idempotency_key: input.idempotencyKey ?? null,
  result: null,
  error: null,
  cancelled_by: null,
  worker: null,
  announce: input.waited ? 1 : 0,
  created_at: at,
  started_at: null,
  finished_at: null,
});
