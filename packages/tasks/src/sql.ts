import { nonNegativeIntegerOption } from '@rigging/core';
import type { Json, JsonObject } from '@rigging/core';
import type { CompiledQuery, Database, Kysely, Migration, PreparedQuery } from '@rigging/sql';
import { isConnectionError, isUniqueViolation, prepareQuery, sql, withCommit } from './sql-peer.js';
import { TasksError, type TaskFailure } from './errors.js';
import {
  fenced,
  flowExists,
  notFound,
  type FlowRecord,
  type FlowState,
  type FlowSummary,
  type LogEntry,
  type TaskLog,
  type TransactionWrite,
} from './log.js';

export type { TaskLog } from './log.js';
import type { TaskContext } from './task.js';

const FLOWS = 'rigging_tasks_flows';
const LOG = 'rigging_tasks_log';

/** The migrations of the `tasks` namespace (run by {@link sqlLog}). */
export const migrations: readonly Migration[] = [
  {
    name: 'create flows and log',
    async up(db) {
      await db.schema
        .createTable(FLOWS)
        .addColumn('flow_id', 'varchar(191)', (c) => c.primaryKey())
        .addColumn('name', 'varchar(255)', (c) => c.notNull())
        .addColumn('state', 'varchar(32)', (c) => c.notNull())
        .addColumn('definition', 'text', (c) => c.notNull())
        .addColumn('inputs', 'text', (c) => c.notNull())
        .addColumn('token', 'bigint')
        .addColumn('writes', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex(`${FLOWS}_state`)
        .on(FLOWS)
        .columns(['state', 'created_at'])
        .execute();
      await db.schema
        .createTable(LOG)
        .addColumn('flow_id', 'varchar(191)', (c) => c.notNull())
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('task', 'varchar(255)')
        .addColumn('state', 'varchar(32)', (c) => c.notNull())
        .addColumn('attempt', 'integer')
        .addColumn('payload', 'text')
        .addColumn('token', 'bigint')
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${LOG}_pk`, ['flow_id', 'seq'])
        .execute();
    },
  },
];

interface FlowRow {
  flow_id: string;
  name: string;
  state: string;
  definition: string;
  inputs: string;
  token: string | number | bigint | null;
  writes: number | string;
  created_at: number | string;
  updated_at: number | string;
}
interface LogRow {
  flow_id: string;
  seq: number;
  task: string | null;
  state: string;
  attempt: number | null;
  payload: string | null;
  token: string | number | bigint | null;
  at: number | string;
}
interface Tables {
  [FLOWS]: FlowRow;
  [LOG]: LogRow;
}

const big = (v: string | number | bigint | null | undefined): bigint | null =>
  v === null || v === undefined ? null : BigInt(v);

function toRow(flowId: string, e: LogEntry): LogRow {
  const payload: { result?: Json; failure?: TaskFailure; subflow?: true } = {};
  if (e.result !== undefined) payload.result = e.result;
  if (e.failure !== undefined) payload.failure = e.failure;
  if (e.subflow === true) payload.subflow = true;
  return {
    flow_id: flowId,
    seq: e.seq,
    task: e.task,
    state: e.state,
    attempt: e.attempt ?? null,
    payload:
      e.result !== undefined || e.failure !== undefined || e.subflow === true
        ? JSON.stringify(payload)
        : null,
    token: e.token == null ? null : e.token.toString(),
    at: e.at,
  };
}

/** The flow table's row of a new flow. */
function flowRow(record: FlowRecord): FlowRow {
  return {
    flow_id: record.flowId,
    name: record.name,
    state: record.state,
    definition: JSON.stringify(record.definition),
    inputs: JSON.stringify(record.inputs),
    token: record.token === null ? null : record.token.toString(),
    writes: 0,
    created_at: record.createdAt,
    updated_at: record.updatedAt,
  };
}

function fromRow(r: LogRow): LogEntry {
  const e: LogEntry = {
    seq: Number(r.seq),
    task: r.task,
    state: r.state as LogEntry['state'],
    at: Number(r.at),
  };
  if (r.attempt !== null && r.attempt !== undefined) e.attempt = Number(r.attempt);
  if (r.payload) {
    const p = JSON.parse(r.payload) as { result?: Json; failure?: TaskFailure; subflow?: true };
    if ('result' in p) e.result = p.result as Json;
    if (p.failure) e.failure = p.failure;
    if (p.subflow === true) e.subflow = true;
  }
  e.token = big(r.token);
  return e;
}

function recordOf(r: FlowRow): FlowRecord {
  return {
    flowId: r.flow_id,
    name: r.name,
    state: r.state as FlowState,
    definition: JSON.parse(r.definition) as FlowRecord['definition'],
    inputs: JSON.parse(r.inputs) as JsonObject,
    token: big(r.token),
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
  };
}

type Db = Database<Tables>['db'];

const LOG_COLUMNS = ['flow_id', 'seq', 'task', 'state', 'attempt', 'payload', 'at'] as const;
const FLOW_COLUMNS = [
  'flow_id',
  'name',
  'state',
  'definition',
  'inputs',
  'writes',
  'created_at',
  'updated_at',
] as const;

/** A unique violation on the log's key: another engine wrote that position (`tasks.fenced`); other errors as they are. */
function positionTaken(error: unknown, flowId: string, entries: LogEntry[]): unknown {
  if (!isUniqueViolation(error)) return error;
  return new TasksError(
    'tasks.fenced',
    `flow ${flowId}: log position ${entries[0]?.seq ?? '?'} already written by another engine`,
    { cause: error, details: { flowId } },
  );
}

/** The parameters of the PostgreSQL statements below, by name. */
type Params = Record<string, unknown>;

/** The log's columns with their types, in the order of a PostgreSQL `values` list of its rows. */
const LOG_TYPES = {
  flow_id: 'varchar',
  seq: 'integer',
  task: 'varchar',
  state: 'varchar',
  attempt: 'integer',
  payload: 'text',
  token: 'bigint',
  at: 'bigint',
} as const;

/** `p` with the log rows of `entries`: parameter `<column><i>` for row `i` (see {@link pgRows}). */
function rowParams(p: Params, flowId: string, entries: LogEntry[]): Params {
  entries.forEach((e, i) => {
    for (const [column, value] of Object.entries(toRow(flowId, e)))
      p[`${column}${i}`] = value ?? null;
  });
  return p;
}

/** PostgreSQL: `n` log rows as a typed `values` list of the parameters of {@link rowParams}. */
function pgRows(p: Params, n: number) {
  const rows = Array.from(
    { length: n },
    (_, i) =>
      sql`(${sql.join(Object.entries(LOG_TYPES).map(([c, type]) => sql`${p[`${c}${i}`]}::${sql.raw(type)}`))})`,
  );
  return sql`select v.* from (values ${sql.join(rows)}) as v(flow_id, seq, task, state, attempt, payload, token, at)`;
}

/**
 * The log's PostgreSQL statements, prepared once per shape (rows written, optional clauses): the
 * builder's cost is paid once, not on every task. Beyond {@link SHAPES} shapes (a write of many
 * rows at once is rare) a statement is built for its one use.
 */
const shapes = new Map<string, PreparedQuery<Params, unknown>>();
const SHAPES = 64;

function shaped(
  key: string,
  build: (db: Db, p: Params) => { compile(db: Kysely<any>): CompiledQuery<unknown> },
) {
  const cached = shapes.get(key);
  if (cached) return cached;
  const query = prepareQuery((db, p: Params) => build(db as Db, p));
  if (shapes.size < SHAPES) shapes.set(key, query);
  return query;
}

/** The fenced flow update and `n` log rows in one statement: see `#appendStatement`. */
const appendQuery = (n: number, state: boolean, token: boolean, checked: boolean) =>
  shaped(`append ${n} ${+state}${+token}${+checked}`, (_db, p) => {
    const sets = [sql`writes = writes + 1`, sql`updated_at = ${p.at}`];
    if (state) sets.push(sql`state = ${p.state}`);
    if (token) sets.push(sql`token = ${p.token}::bigint`);
    const fence = token ? sql` and (token is null or token <= ${p.token}::bigint)` : sql``;
    const held = checked
      ? sql`1 / (select count(*)::integer from u) = 1`
      : sql`exists (select 1 from u)`;
    return sql`
      with u as (
        update ${sql.table(FLOWS)} set ${sql.join(sets)} where flow_id = ${p.flowId}${fence} returning 1
      )
      insert into ${sql.table(LOG)} (flow_id, seq, task, state, attempt, payload, token, at)
      ${pgRows(p, n)} where ${held}`;
  });

/** A flow's record and its first `n` log rows in one statement: see `#createStatement`. */
const createQuery = (n: number) =>
  shaped(`create ${n}`, (db, p) => {
    const row = Object.fromEntries([...FLOW_COLUMNS, 'token'].map((c) => [c, p[c]]));
    const flow = db.insertInto(FLOWS).values(row as unknown as FlowRow);
    if (n === 0) return flow;
    return sql`
      with f as (${flow.returning(sql<number>`1`.as('one'))})
      insert into ${sql.table(LOG)} (flow_id, seq, task, state, attempt, payload, token, at)
      ${pgRows(p, n)} where exists (select 1 from f)`;
  });

/** PostgreSQL's division by zero: a checked append the fence refused (`#appendStatement`). */
const isFenceFailure = (error: unknown): boolean =>
  (error as { code?: unknown } | null)?.code === '22012';

/** The task log of {@link sqlLog}: one instance per database, its tables migrated. */
class SqlTaskLog implements TaskLog {
  readonly #database: Database;
  readonly #db: Db;
  /** better-sqlite3 reads integers beyond 2^53 lossily: fencing tokens are read as text. */
  readonly #tokenText;

  constructor(database: Database) {
    this.#database = database;
    this.#db = (database as Database<Tables>).db;
    this.#tokenText =
      database.dialect === 'sqlite' ? sql<string>`cast(token as text)` : sql<string>`token`;
  }

  #readLog(flowId: string) {
    return this.#db
      .selectFrom(LOG)
      .select([...LOG_COLUMNS, this.#tokenText.as('token')])
      .where('flow_id', '=', flowId)
      .orderBy('seq')
      .execute();
  }

  /** A fenced write matched no flow: throws `tasks.flow_not_found`, or `tasks.fenced` with the stored token. */
  async #rejectWrite(db: Db, flowId: string, token: bigint | null | undefined): Promise<never> {
    const row = await db
      .selectFrom(FLOWS)
      .select(this.#tokenText.as('token'))
      .where('flow_id', '=', flowId)
      .executeTakeFirst();
    if (!row) throw notFound(flowId);
    throw fenced(flowId, token, big(row.token));
  }

  /**
   * PostgreSQL, one statement, so one round trip (and no transaction of its own outside one):
   * the fenced flow update and the inserts commit together or not at all. When the fence holds
   * no flow, nothing is inserted; `checked`, the statement fails instead (division by zero:
   * `FENCE_FAILED`), so that it can be the last of a transaction sent with its commit, whose
   * outcome is not read before the commit. Returned bound to `db`, not run.
   */
  #appendStatement(
    db: Db,
    flowId: string,
    entries: LogEntry[],
    update: { state?: FlowState; token?: bigint | null },
    checked: boolean,
  ) {
    const { state, token } = update;
    const p = rowParams({ flowId, at: entries[entries.length - 1]!.at }, flowId, entries);
    if (state) p.state = state;
    if (token != null) p.token = token.toString();
    return appendQuery(entries.length, !!state, token != null, checked).bind(db, p);
  }

  /** PostgreSQL: {@link #appendStatement}, run; a write the fence refused is rejected. */
  async #appendPostgres(
    db: Db,
    flowId: string,
    entries: LogEntry[],
    update: { state?: FlowState; token?: bigint | null },
  ): Promise<void> {
    const result = await db.executeQuery(
      this.#appendStatement(db, flowId, entries, update, false).compile(),
    );
    if (Number(result.numAffectedRows ?? 0) === 0) {
      await this.#rejectWrite(db, flowId, update.token);
    }
  }

  /** PostgreSQL: the flow's record and its first entries in one statement (see above). */
  #createStatement(db: Db, record: FlowRecord, entries: LogEntry[]) {
    const p = rowParams({ ...flowRow(record) }, record.flowId, entries);
    return createQuery(entries.length).bind(db, p);
  }

  async #createPostgres(db: Db, record: FlowRecord, entries: LogEntry[]): Promise<void> {
    await db.executeQuery(this.#createStatement(db, record, entries).compile());
  }

  /**
   * SQLite, task transitions by the current owner: one autocommitted statement that inserts the
   * entries only while the flow's token is still the writer's (writers are serialized by SQLite,
   * so the check and the insert are atomic). Anything else takes the transactional path.
   */
  async #appendSqliteFast(
    flowId: string,
    entries: LogEntry[],
    token: bigint | null | undefined,
  ): Promise<boolean> {
    const fence = token == null ? sql`token is null` : sql`token = ${token.toString()}`;
    const rows = entries.map((e) => {
      const r = toRow(flowId, e);
      return sql`(${r.flow_id}, ${r.seq}, ${r.task}, ${r.state}, ${r.attempt}, ${r.payload}, ${r.token}, ${r.at})`;
    });
    const result = await sql`
      insert into ${sql.table(LOG)} (flow_id, seq, task, state, attempt, payload, token, at)
      select * from (values ${sql.join(rows)})
      where exists (select 1 from ${sql.table(FLOWS)} where flow_id = ${flowId} and ${fence})`.execute(
      this.#db,
    );
    return Number(result.numAffectedRows ?? 0) === entries.length;
  }

  /** Inserts the flow's record and its first entries with `t`. */
  async #createIn(t: Db, record: FlowRecord, entries: LogEntry[]): Promise<void> {
    if (this.#database.dialect === 'postgres') return this.#createPostgres(t, record, entries);
    await t.insertInto(FLOWS).values(flowRow(record)).execute();
    if (entries.length) {
      await t
        .insertInto(LOG)
        .values(entries.map((e) => toRow(record.flowId, e)))
        .execute();
    }
  }

  /** The fenced flow update and the inserts of an append, with `t` (inside a transaction). */
  async #appendIn(
    t: Db,
    flowId: string,
    entries: LogEntry[],
    update: { state?: FlowState; token?: bigint | null },
  ): Promise<void> {
    if (this.#database.dialect === 'postgres' && entries.length > 0) {
      return this.#appendPostgres(t, flowId, entries, update);
    }
    const token = update.token;
    let q = t
      .updateTable(FLOWS)
      .set((eb) => {
        const set: Record<string, unknown> = { writes: eb('writes', '+', 1) };
        if (update.state) set.state = update.state;
        if (token != null) set.token = token.toString();
        if (entries.length) set.updated_at = entries[entries.length - 1]!.at;
        return set as never;
      })
      .where('flow_id', '=', flowId);
    if (token != null) {
      q = q.where((eb) =>
        eb.or([eb('token', 'is', null), eb('token', '<=', token.toString() as never)]),
      );
    }
    const res = await q.executeTakeFirst();
    if (Number(res.numUpdatedRows) === 0) await this.#rejectWrite(t, flowId, token);
    if (entries.length) {
      await t
        .insertInto(LOG)
        .values(entries.map((e) => toRow(flowId, e)))
        .execute();
    }
  }

  async create(record: FlowRecord, entries: LogEntry[]): Promise<void> {
    try {
      // PostgreSQL writes it in one statement: no transaction around it (two round trips fewer).
      if (this.#database.dialect === 'postgres') await this.#createIn(this.#db, record, entries);
      else await this.#database.transaction((trx) => this.#createIn(trx as Db, record, entries));
    } catch (error) {
      if (isUniqueViolation(error)) throw flowExists(record.flowId);
      throw error;
    }
  }

  async append(
    flowId: string,
    entries: LogEntry[],
    update: { state?: FlowState; token?: bigint | null },
  ): Promise<void> {
    try {
      if (this.#database.dialect === 'postgres' && entries.length > 0) {
        await this.#appendPostgres(this.#db, flowId, entries, update);
        return;
      }
      if (this.#database.dialect === 'sqlite' && entries.length > 0 && !update.state) {
        if (await this.#appendSqliteFast(flowId, entries, update.token)) return;
      }
      await this.#database.transaction((trx) => this.#appendIn(trx as Db, flowId, entries, update));
    } catch (error) {
      throw positionTaken(error, flowId, entries);
    }
  }

  async transaction<T>(
    flowId: string,
    work: (transaction: unknown) => Promise<TransactionWrite<T>>,
  ): Promise<T> {
    let write: TransactionWrite<T> | undefined;
    try {
      // Resolves with `write.value` (`withCommit`'s value unwrapped), which TypeScript cannot
      // tell for a generic `T`.
      return (await this.#database.transaction(async (trx) => {
        write = undefined;
        write = await work(trx);
        const t = trx as Db;
        // PostgreSQL: the log's write is the transaction's last statement, sent with its commit
        // (one round trip for both); a fence that refuses it fails it, and so the transaction.
        if (withCommit && this.#database.dialect === 'postgres') {
          if (write.create) {
            return withCommit(this.#createStatement(t, write.create, write.entries), write.value);
          }
          if (write.entries.length > 0) {
            const append = this.#appendStatement(t, flowId, write.entries, write.update, true);
            return withCommit(append, write.value);
          }
        }
        if (write.create) await this.#createIn(t, write.create, write.entries);
        else await this.#appendIn(t, flowId, write.entries, write.update);
        return write.value;
      })) as T;
    } catch (error) {
      // Only the log's own inserts map to log errors; a unique violation of the work is its own.
      if (write !== undefined && isUniqueViolation(error)) {
        if (write.create) throw flowExists(flowId);
        throw positionTaken(error, flowId, write.entries);
      }
      // The checked append's refusal (see #appendStatement): the work's own statements ran
      // before it and were awaited, so a division by zero here is the log's.
      if (write !== undefined && !write.create && isFenceFailure(error)) {
        await this.#rejectWrite(this.#db, flowId, write.update.token);
      }
      throw error;
    }
  }

  async load(flowId: string): Promise<{ record: FlowRecord; entries: LogEntry[] } | undefined> {
    const row = await this.#db
      .selectFrom(FLOWS)
      .select([...FLOW_COLUMNS, this.#tokenText.as('token')])
      .where('flow_id', '=', flowId)
      .executeTakeFirst();
    if (!row) return undefined;
    const rows = await this.#readLog(flowId);
    return { record: recordOf(row), entries: rows.map(fromRow) };
  }

  async history(flowId: string): Promise<LogEntry[]> {
    const rows = await this.#readLog(flowId);
    return rows.map(fromRow);
  }

  async flows(
    options: { states?: readonly FlowState[]; limit?: number } = {},
  ): Promise<FlowSummary[]> {
    const limit = nonNegativeIntegerOption('flows', 'limit', options.limit);
    let q = this.#db
      .selectFrom(FLOWS)
      .select(['flow_id', 'name', 'state', 'created_at', 'updated_at'])
      .orderBy('created_at', 'desc')
      .orderBy('flow_id');
    if (options.states) {
      if (options.states.length === 0) return [];
      q = q.where('state', 'in', [...options.states]);
    }
    if (limit !== undefined) q = q.limit(limit);
    const rows = await q.execute();
    return rows.map((r): FlowSummary => ({
      flowId: r.flow_id,
      name: r.name,
      state: r.state as FlowState,
      createdAt: Number(r.created_at),
      updatedAt: Number(r.updated_at),
    }));
  }

  async remove(flowId: string): Promise<void> {
    await this.#database.transaction(async (trx) => {
      await (trx as Db).deleteFrom(LOG).where('flow_id', '=', flowId).execute();
      await (trx as Db).deleteFrom(FLOWS).where('flow_id', '=', flowId).execute();
    });
  }

  /** A lost connection as `@rigging/sql` recognises it (refused, reset, terminated by the server). */
  isConnectionLoss(error: unknown): boolean {
    return isConnectionError(error);
  }
}

/**
 * A task log in a SQL database opened by `@rigging/sql` (SQLite, PostgreSQL, MySQL/MariaDB),
 * in tables prefixed `rigging_tasks_` created by `database.migrate('tasks', …)`. Every append is
 * one transaction, committed before it resolves; the fencing check and the append are atomic.
 * On SQLite, `synchronous = 'normal'` (WAL, the default of `openDatabase`) survives a process
 * crash; `'full'` also survives power loss.
 */
export async function sqlLog(database: Database): Promise<TaskLog> {
  if (!database || typeof database !== 'object' || !('db' in database)) {
    throw new TypeError('sqlLog(database): pass a Database opened by @rigging/sql');
  }
  await database.migrate('tasks', migrations);
  return new SqlTaskLog(database);
}

/**
 * Runs `work` in the transaction of a task defined with `transaction: true` on a
 * {@link sqlLog}, typed with your tables (`ctx.transaction`, typed): what `work` writes commits
 * together with the task's SUCCESS in the log, whose result is what `work` returns (the log's
 * database must be the one `work` writes to). A `TypeError` for any other task.
 *
 * @example
 * task({
 *   name: 'debit',
 *   transaction: true,
 *   execute: (ctx, { account }: { account: string }) =>
 *     sqlTransaction<MyTables, null>(ctx, async (trx) => {
 *       await trx
 *         .updateTable('accounts')
 *         .set((eb) => ({ balance: eb('balance', '-', 10) }))
 *         .where('id', '=', account)
 *         .execute();
 *       return null;
 *     }),
 * });
 */
export function sqlTransaction<DB, T>(
  ctx: TaskContext,
  work: (transaction: Kysely<DB>) => T | Promise<T>,
): Promise<T> {
  if (typeof ctx?.transaction !== 'function') {
    throw new TypeError(
      `sqlTransaction(ctx, work): task '${String(ctx?.task)}' has no transaction; define it with transaction: true and run it on sqlLog`,
    );
  }
  return ctx.transaction((transaction) => work(transaction as Kysely<DB>));
}
