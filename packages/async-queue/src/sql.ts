import { randomUUID } from 'node:crypto';
import type { Clock, Logger, SerializedError } from '@rigging/core';
import type {
  Database,
  Expression,
  ExpressionBuilder,
  Kysely,
  SqlBool,
  Migration,
  Session,
} from '@rigging/sql';
import { isUniqueViolation, sql } from './sql-peer.js';
import type {
  BackendContext,
  Claim,
  ClaimOptions,
  Completion,
  EnqueueInput,
  FailOutcome,
  QueueBackend,
} from './backend.js';
import { QueueError } from './errors.js';
import type { KeyInfo, KeyStatus, OpInfo, OpStatus, RetentionOptions } from './types.js';

/** Options of {@link sqlBackend}. */
export interface SqlBackendOptions {
  /**
   * The queue's name: queues with the same name on one database share ops (the jobboard);
   * different names are independent. @default 'default'
   */
  name?: string;
  /**
   * How often workers look for work that no wake-up announced (other processes' enqueues on
   * SQLite/MySQL, expired leases, due retries). @default 250 (SQLite, MySQL), 2000 (PostgreSQL)
   */
  pollMs?: number;
  /** PostgreSQL: LISTEN/NOTIFY wake-ups. @default true */
  notify?: boolean;
}

const OPS = 'rigging_queue_ops';
const KEYS = 'rigging_queue_keys';
const CHANNEL = 'rigging_queue';
const SUCCEED_FN = 'rigging_queue_succeed_v1';
const CLAIM_FN = 'rigging_queue_claim_v1';
const SUCCEED_MANY_FN = 'rigging_queue_succeed_many_v1';
const ENQUEUE_FN = 'rigging_queue_enqueue_v1';
/** Successes recorded together at most (one statement or transaction). */
const SUCCEED_BATCH = 64;
/** Batches of successes being recorded at once by one backend instance. */
const MAX_SUCCEED_BATCHES = 2;

/**
 * PostgreSQL: the claim CTEs of the first functions below: `k` (up to `p_n` ready keys, locked,
 * skipping locked ones; `guard` may add a condition), `h` (their head ops, always found through
 * the `(queue, op_key, status, seq)` index), `u` (those ops, claimed) and `g` (their keys,
 * running). Superseded by {@link CLAIM_BY_KEY_FUNCTION} (migration `pg-functions-by-key`).
 */
const claimCteText = (guard: string) => `k as (
    select queue, op_key, token from ${KEYS}
    where queue = p_queue and state = 'ready' and avail_at <= p_at
${guard}    order by turn, op_key
    limit p_n
    for update skip locked
  ), h as (
    select o.id, o.op_key, k.token + 1 as next_token
    from k cross join lateral (
      select o.id, o.op_key from ${OPS} o
      where o.queue = k.queue and o.op_key = k.op_key and o.status = 'queued'
      order by o.seq
      limit 1
    ) as o
  ), u as (
    update ${OPS} as o
    set status = 'running', token = h.next_token, attempts = o.attempts + 1,
        worker = p_worker, started_at = p_at
    from h
    where o.id = h.id and o.status = 'queued'
    returning o.*
  ), g as (
    update ${KEYS} as kk
    set state = 'running', running_op = u.id, running_type = u.type, token = u.token,
        lease_until = p_lease_until, pending = kk.pending - 1
    from u
    where kk.queue = p_queue and kk.op_key = u.op_key
    returning kk.op_key
  )
`;

/**
 * PostgreSQL: records a success if the claim still holds its key (fencing token) and claims up
 * to `p_n` (0 or 1) next fair ops in the same statement. One JSON row: `ok` (1 when the claim
 * held), `notified`, `picked` (a key locked for the next claim, or null) and the claimed op's
 * columns (null when the picked key's head could not be claimed here).
 */
const SUCCEED_FUNCTION = `
create or replace function ${SUCCEED_FN}(
  p_queue text, p_key text, p_op text, p_token integer, p_result text, p_at bigint,
  p_notice text, p_n integer, p_lease_until bigint, p_worker text
) returns setof json language plpgsql as $fn$
begin
  return query
  with fin as (
    update ${KEYS}
    set state = case when pending > 0 then 'ready' else 'idle' end,
        running_op = null, running_type = null, avail_at = 0, turn = p_at
    where queue = p_queue and op_key = p_key and state = 'running'
      and running_op = p_op and token = p_token
    returning op_key
  ), fo as (
    update ${OPS}
    set status = 'succeeded', result = p_result, error = null, finished_at = p_at
    where id = p_op and exists (select 1 from fin)
    returning id
  ), n as (
    select pg_notify('${CHANNEL}', p_notice) from fo where p_notice is not null
  ), ${claimCteText('      and exists (select 1 from fin)\n')}  select row_to_json(c) from (
    select (select count(*) from fin) as ok, (select count(*) from n) as notified, x.*
    from (select 1 as one) as one left join (
      select k.op_key as picked, u.* from k left join u on u.op_key = k.op_key
    ) as x on true
  ) as c;
end
$fn$`;

/**
 * PostgreSQL: claims up to `p_n` ready head ops (fairness: oldest turn first). One JSON row per
 * picked key: `picked` and the claimed op's columns (null when its head could not be claimed
 * here).
 */
const CLAIM_FUNCTION = `
create or replace function ${CLAIM_FN}(
  p_queue text, p_n integer, p_at bigint, p_lease_until bigint, p_worker text
) returns setof json language plpgsql as $fn$
begin
  return query
  with ${claimCteText('')}  select row_to_json(x) from (
    select k.op_key as picked, u.* from k left join u on u.op_key = k.op_key
  ) as x;
end
$fn$`;

/**
 * PostgreSQL: claims up to `p_n` ready head ops, fairly (oldest turn first, in the order of the
 * `(queue, state, turn, op_key)` index), one key at a time: each statement looks a key row up by
 * its primary key and the head op through the `(queue, op_key, status, seq)` index, whatever the
 * planner's statistics say. (The set-based version joined key rows on `op_key`, which on fresh,
 * not yet analyzed tables was planned as a scan of every key of the queue per statement.) One
 * JSON row per picked key: `picked` and the claimed op's columns (none when its head could not be
 * claimed here). Replaces the body of {@link CLAIM_FUNCTION}; same signature and rows.
 */
const CLAIM_BY_KEY_FUNCTION = `
create or replace function ${CLAIM_FN}(
  p_queue text, p_n integer, p_at bigint, p_lease_until bigint, p_worker text
) returns setof json language plpgsql as $fn$
declare
  r record;
  o ${OPS};
begin
  if p_n <= 0 then return; end if;
  for r in
    select k.op_key, k.token from ${KEYS} k
    where k.queue = p_queue and k.state = 'ready' and k.avail_at <= p_at
    order by k.turn, k.op_key
    limit p_n
    for update skip locked
  loop
    update ${OPS} as x
    set status = 'running', token = r.token + 1, attempts = x.attempts + 1,
        worker = p_worker, started_at = p_at
    where x.id = (
      select y.id from ${OPS} y
      where y.queue = p_queue and y.op_key = r.op_key and y.status = 'queued'
      order by y.seq
      limit 1
    ) and x.status = 'queued'
    returning x.* into o;
    if found then
      update ${KEYS} as kk
      set state = 'running', running_op = o.id, running_type = o.type, token = o.token,
          lease_until = p_lease_until, pending = kk.pending - 1
      where kk.queue = p_queue and kk.op_key = r.op_key;
      return next (to_jsonb(o) || jsonb_build_object('picked', r.op_key))::json;
    else
      return next json_build_object('picked', r.op_key);
    end if;
  end loop;
end
$fn$`;

/**
 * PostgreSQL: records a batch of successes, each only if its claim still holds its key (fencing
 * token per op), then claims as many next fair ops as there were accepted successes that asked
 * for one (`p_next`). Key rows are locked in key order (two batches cannot deadlock) and looked up
 * by primary key. The first JSON row is `{ ok: [ordinals of the accepted successes, 1-based] }`;
 * the further rows are those of the claim function. The claim sees the keys just finished
 * (ready again, newest turn).
 */
const SUCCEED_MANY_FUNCTION = `
create or replace function ${SUCCEED_MANY_FN}(
  p_queue text, p_keys text[], p_ops text[], p_tokens integer[], p_results text[],
  p_notices text[], p_next boolean[], p_at bigint, p_lease_until bigint, p_worker text
) returns setof json language plpgsql as $fn$
declare
  v_i integer;
  v_state text;
  v_op text;
  v_token integer;
  v_ok integer[] := '{}';
  v_n integer := 0;
begin
  for v_i in
    select i from generate_subscripts(p_keys, 1) as i order by p_keys[i], i
  loop
    select k.state, k.running_op, k.token into v_state, v_op, v_token
    from ${KEYS} k
    where k.queue = p_queue and k.op_key = p_keys[v_i]
    for update;
    if found and v_state = 'running' and v_op = p_ops[v_i] and v_token = p_tokens[v_i] then
      update ${KEYS} as kk
      set state = case when kk.pending > 0 then 'ready' else 'idle' end,
          running_op = null, running_type = null, avail_at = 0, turn = p_at
      where kk.queue = p_queue and kk.op_key = p_keys[v_i];
      update ${OPS} as o
      set status = 'succeeded', result = p_results[v_i], error = null, finished_at = p_at
      where o.id = p_ops[v_i];
      if p_notices[v_i] is not null then
        perform pg_notify('${CHANNEL}', p_notices[v_i]);
      end if;
      v_ok := v_ok || v_i;
      if p_next[v_i] then v_n := v_n + 1; end if;
    end if;
  end loop;
  return next json_build_object('ok', v_ok);
  if v_n > 0 then
    return query select * from ${CLAIM_FN}(p_queue, v_n, p_at, p_lease_until, p_worker);
  end if;
end
$fn$`;

/**
 * PostgreSQL: stores an op (no idempotency check here): one upsert counts it in on its key row
 * (readying an idle key; the row lock serializes enqueues of one key), one insert stores it, and
 * workers are woken (NOTIFY) when the key was idle. Returns `{ state, next_seq }` of the key.
 * A function, so that the statement is planned once per connection, not on every enqueue.
 */
const ENQUEUE_FUNCTION = `
create or replace function ${ENQUEUE_FN}(
  p_queue text, p_key text, p_id text, p_type text, p_payload text, p_idem text,
  p_announce integer, p_at bigint
) returns json language plpgsql as $fn$
declare
  v_state text;
  v_seq bigint;
  v_pending integer;
begin
  insert into ${KEYS} as kk (queue, op_key, state, next_seq, pending, avail_at, turn)
  values (p_queue, p_key, 'ready', 1, 1, 0, p_at)
  on conflict (queue, op_key) do update set
    next_seq = kk.next_seq + 1,
    pending = kk.pending + 1,
    avail_at = case when kk.state = 'idle' then 0 else kk.avail_at end,
    turn = case when kk.state = 'idle' then p_at else kk.turn end,
    state = case when kk.state = 'idle' then 'ready' else kk.state end
  returning kk.state, kk.next_seq, kk.pending into v_state, v_seq, v_pending;
  insert into ${OPS} (id, queue, op_key, seq, type, payload, status, attempts, expiries, token,
                      idempotency_key, announce, created_at)
  values (p_id, p_queue, p_key, v_seq, p_type, p_payload, 'queued', 0, 0, 0, p_idem, p_announce,
          p_at);
  if v_state = 'ready' and v_pending = 1 then
    perform pg_notify('${CHANNEL}', 'n:' || p_queue);
  end if;
  return json_build_object('state', v_state, 'next_seq', v_seq);
end
$fn$`;

/** The schema of `@rigging/async-queue/sql` (namespace `async-queue`). */
export const migrations: readonly Migration[] = [
  {
    name: 'create-queue-tables',
    async up(db) {
      await db.schema
        .createTable(OPS)
        .addColumn('id', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('queue', 'varchar(64)', (c) => c.notNull())
        .addColumn('op_key', 'varchar(255)', (c) => c.notNull())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .addColumn('type', 'varchar(128)', (c) => c.notNull())
        .addColumn('payload', 'text', (c) => c.notNull())
        .addColumn('status', 'varchar(16)', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('expiries', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('token', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('idempotency_key', 'varchar(255)')
        .addColumn('result', 'text')
        .addColumn('error', 'text')
        .addColumn('cancelled_by', 'varchar(36)')
        .addColumn('worker', 'varchar(255)')
        .addColumn('announce', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('started_at', 'bigint')
        .addColumn('finished_at', 'bigint')
        .execute();
      await db.schema
        .createIndex('rigging_queue_ops_key')
        .on(OPS)
        .columns(['queue', 'op_key', 'status', 'seq'])
        .execute();
      await db.schema
        .createIndex('rigging_queue_ops_idem')
        .on(OPS)
        .columns(['queue', 'idempotency_key'])
        .unique()
        .execute();
      await db.schema
        .createIndex('rigging_queue_ops_finished')
        .on(OPS)
        .columns(['queue', 'status', 'finished_at'])
        .execute();
      await db.schema
        .createTable(KEYS)
        .addColumn('queue', 'varchar(64)', (c) => c.notNull())
        .addColumn('op_key', 'varchar(255)', (c) => c.notNull())
        .addColumn('state', 'varchar(16)', (c) => c.notNull())
        .addColumn('next_seq', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('pending', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('avail_at', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('turn', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('running_op', 'varchar(36)')
        .addColumn('running_type', 'varchar(128)')
        .addColumn('token', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('lease_until', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('blocked_by', 'varchar(36)')
        .addPrimaryKeyConstraint('rigging_queue_keys_pk', ['queue', 'op_key'])
        .execute();
      await db.schema
        .createIndex('rigging_queue_keys_turn')
        .on(KEYS)
        .columns(['queue', 'state', 'turn'])
        .execute();
    },
  },
  {
    // PostgreSQL plans a statement on every execution unless it is prepared, and the success
    // path's one statement (seven CTEs) cost more to plan than to run. A PL/pgSQL function keeps
    // its plan per connection: same statement, planned once.
    name: 'pg-succeed-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(SUCCEED_FUNCTION).execute(db);
    },
  },
  {
    // The worker loop's claim (and so the idle enqueue → start latency), planned once too.
    name: 'pg-claim-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(CLAIM_FUNCTION).execute(db);
    },
  },
  {
    // Successes that arrive while another is being recorded go together: one statement and one
    // commit for many ops (each still checked against its own fencing token).
    name: 'pg-succeed-many-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(SUCCEED_MANY_FUNCTION).execute(db);
    },
  },
  {
    // The fair pick orders ready keys by (turn, op_key): an index in that order lets it stop
    // after `limit` keys instead of sorting every ready key of the queue. On PostgreSQL and
    // SQLite the index holds only ready keys (and another only running ones, for the look for
    // expired leases): look-ups of one key by (queue, op_key) then have no index to take but the
    // primary key, whatever the planner's statistics say, and a key that starts or stops running
    // changes fewer index entries. MySQL has no partial indexes: one index on every key.
    name: 'keys-turn-key-index',
    async up(db, { dialect }) {
      if (dialect === 'mysql') {
        await db.schema
          .createIndex('rigging_queue_keys_turn_key')
          .on(KEYS)
          .columns(['queue', 'state', 'turn', 'op_key'])
          .execute();
        await db.schema.dropIndex('rigging_queue_keys_turn').on(KEYS).execute();
        return;
      }
      await sql
        .raw(
          `create index rigging_queue_keys_ready on ${KEYS} (queue, turn, op_key) where state = 'ready'`,
        )
        .execute(db);
      await sql
        .raw(
          `create index rigging_queue_keys_running on ${KEYS} (queue, lease_until) where state = 'running'`,
        )
        .execute(db);
      await db.schema.dropIndex('rigging_queue_keys_turn').execute();
    },
  },
  {
    // Key rows looked up through the primary key whatever the planner's statistics say.
    name: 'pg-functions-by-key',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(CLAIM_BY_KEY_FUNCTION).execute(db);
      await sql.raw(SUCCEED_MANY_FUNCTION).execute(db);
    },
  },
  {
    // Enqueues planned once per connection too.
    name: 'pg-enqueue-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(ENQUEUE_FUNCTION).execute(db);
    },
  },
];

interface OpRow {
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

interface KeyRow {
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
}

const num = (v: number | string | null | undefined): number | undefined =>
  v === null || v === undefined ? undefined : Number(v);

const parse = (text: string | null): unknown => (text === null ? undefined : JSON.parse(text));

function toInfo(row: OpRow, held = false): OpInfo {
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

type Db = Kysely<any>;

interface LocalListener {
  wake(): void;
  settled(id: string): void;
}

/**
 * Queue instances of one process sharing a Database object and queue name wake each other
 * directly (no need to wait for NOTIFY or the next poll).
 */
const local = new WeakMap<Database, Map<string, Set<LocalListener>>>();

function localListeners(database: Database, name: string): Set<LocalListener> {
  let byName = local.get(database);
  if (!byName) local.set(database, (byName = new Map()));
  let set = byName.get(name);
  if (!set) byName.set(name, (set = new Set()));
  return set;
}

/**
 * The durable jobboard over `@rigging/sql` (SQLite, PostgreSQL, MySQL/MariaDB). Tables
 * `rigging_queue_ops` and `rigging_queue_keys`, created by `database.migrate('async-queue')` on
 * first use. Many queue instances, in many processes, may share one database and queue name.
 * The database stays the caller's: closing the queue does not close it.
 */
export function sqlBackend(database: Database, options: SqlBackendOptions = {}): QueueBackend {
  const name = options.name ?? 'default';
  if (typeof name !== 'string' || !/^[\w.:-]{1,64}$/.test(name)) {
    throw new TypeError(`name must be 1-64 word characters, got ${JSON.stringify(name)}`);
  }
  const dialect = database.dialect;
  const pollMs = options.pollMs ?? (dialect === 'postgres' ? 2000 : 250);
  if (typeof pollMs !== 'number' || !(pollMs > 0)) {
    throw new TypeError(`pollMs must be a positive number, got ${String(pollMs)}`);
  }
  const notify = dialect === 'postgres' && (options.notify ?? true);
  const locking = dialect !== 'sqlite';
  /** UPDATE … RETURNING and INSERT … ON CONFLICT … RETURNING (PostgreSQL, SQLite ≥ 3.35). */
  const returning = dialect !== 'mysql';
  const db = database.db as Db;
  let clock: Clock | undefined;
  let logger: Logger | undefined;
  let ctx: BackendContext | undefined;
  let session: Session | undefined;
  let closed = false;
  let listenLoop: Promise<void> | undefined;
  const stop = new AbortController();
  let lastExpiredCheck = 0;
  const now = () => (clock ? clock.now() : Date.now());
  const neighbours = localListeners(database, name);
  let me: LocalListener | undefined;
  const wakeLocal = () => {
    for (const l of neighbours) if (l !== me) l.wake();
  };
  const settledLocal = (ids: string[]) => {
    for (const l of neighbours) if (l !== me) for (const id of ids) l.settled(id);
  };

  const tx = <T>(fn: (trx: Db) => Promise<T>) => database.transaction(fn, { retries: 20 });

  const pgNotify = async (trx: Db, payload: string) => {
    if (dialect === 'postgres') await sql`select pg_notify(${CHANNEL}, ${payload})`.execute(trx);
  };

  const keyRow = async (trx: Db, key: string, lock: boolean): Promise<KeyRow | undefined> => {
    let q = trx.selectFrom(KEYS).selectAll().where('queue', '=', name).where('op_key', '=', key);
    if (lock && locking) q = q.forUpdate();
    return (await q.executeTakeFirst()) as KeyRow | undefined;
  };

  const opRow = async (trx: Db, id: string): Promise<OpRow | undefined> =>
    (await trx.selectFrom(OPS).selectAll().where('id', '=', id).executeTakeFirst()) as
      OpRow | undefined;

  const expiredCheckDue = (leaseMs: number) =>
    now() - lastExpiredCheck >= Math.min(pollMs, leaseMs / 2);

  /** The key's head op (MySQL, which has no UPDATE … RETURNING); `undefined` → the key is idle. */
  const headOp = async (trx: Db, key: string): Promise<OpRow | undefined> => {
    const row = (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .orderBy('seq')
      .limit(1)
      .executeTakeFirst()) as OpRow | undefined;
    return row;
  };

  /** Nothing queued after all (the counter drifted): the key is idle. */
  const markIdle = async (trx: Db, key: string) => {
    await trx
      .updateTable(KEYS)
      .set({ state: 'idle', pending: 0 })
      .where('queue', '=', name)
      .where('op_key', '=', key)
      .execute();
  };

  /** After the running op of `key` finished (not blocking): next op or idle. */
  const advanceKey = async (trx: Db, key: string, at: number, claim?: Claim) => {
    let q = trx
      .updateTable(KEYS)
      .set({
        state: sql`case when pending > 0 then 'ready' else 'idle' end`,
        running_op: null,
        running_type: null,
        avail_at: 0,
        turn: at,
      })
      .where('queue', '=', name)
      .where('op_key', '=', key);
    if (claim) {
      q = q
        .where('state', '=', 'running')
        .where('running_op', '=', claim.op.id)
        .where('token', '=', claim.token);
    }
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  };

  const cancelQueued = async (trx: Db, key: string, cause: string, at: number) => {
    const rows = (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .orderBy('seq')
      .execute()) as OpRow[];
    if (rows.length === 0) return [];
    await trx
      .updateTable(OPS)
      .set({ status: 'cancelled', cancelled_by: cause, finished_at: at })
      .where('queue', '=', name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .execute();
    return rows.map((r) =>
      toInfo({ ...r, status: 'cancelled', cancelled_by: cause, finished_at: at }),
    );
  };

  /** Checks the fencing token on the key row (locked first, then the op). */
  const holdsClaim = async (trx: Db, claim: Claim): Promise<boolean> => {
    const k = await keyRow(trx, claim.op.key, true);
    return (
      !!k &&
      k.state === 'running' &&
      k.running_op === claim.op.id &&
      Number(k.token) === claim.token
    );
  };

  const failOp = async (
    trx: Db,
    row: OpRow,
    error: SerializedError,
    stopKey: boolean,
    at: number,
  ): Promise<Completion> => {
    await trx
      .updateTable(OPS)
      .set({ status: 'failed', error: JSON.stringify(error), finished_at: at })
      .where('id', '=', row.id)
      .execute();
    const op = toInfo({ ...row, status: 'failed', error: JSON.stringify(error), finished_at: at });
    if (!stopKey) {
      await advanceKey(trx, row.op_key, at);
      return { op, cancelled: [], blocked: false };
    }
    const cancelled = await cancelQueued(trx, row.op_key, row.id, at);
    await trx
      .updateTable(KEYS)
      .set({
        state: 'blocked',
        blocked_by: row.id,
        pending: 0,
        running_op: null,
        running_type: null,
      })
      .where('queue', '=', name)
      .where('op_key', '=', row.op_key)
      .execute();
    return { op, cancelled, blocked: true };
  };

  const statusOf = async (trx: Db, k: KeyRow | undefined): Promise<KeyStatus> => {
    if (!k) return 'idle';
    switch (k.state) {
      case 'blocked':
        return 'blocked';
      case 'running':
        return `${k.running_type ?? 'op'}-in-progress`;
      case 'ready': {
        const head = (await trx
          .selectFrom(OPS)
          .select(['type', 'attempts'])
          .where('queue', '=', name)
          .where('op_key', '=', k.op_key)
          .where('status', '=', 'queued')
          .orderBy('seq')
          .limit(1)
          .executeTakeFirst()) as { type: string; attempts: number | string } | undefined;
        if (!head) return 'idle';
        return Number(head.attempts) > 0 ? `${head.type}-in-progress` : 'queued';
      }
      default:
        return 'idle';
    }
  };

  const listen = async () => {
    let failures = 0;
    while (!stop.signal.aborted) {
      try {
        session = await database.session();
        await session.query(`LISTEN ${CHANNEL}`);
        failures = 0;
        session.onNotification((n) => {
          const p = n.payload ?? '';
          if (p === `n:${name}`) ctx?.wake();
          else if (p.startsWith(`d:${name}:`)) ctx?.settled(p.slice(name.length + 3));
        });
        ctx?.wake();
        await new Promise<void>((resolve) => {
          const s = session!;
          if (s.lost.aborted || stop.signal.aborted) return resolve();
          const done = () => resolve();
          s.lost.addEventListener('abort', done, { once: true });
          stop.signal.addEventListener('abort', done, { once: true });
        });
        if (!stop.signal.aborted) logger?.warn('async-queue LISTEN session lost; reconnecting');
      } catch (err) {
        failures++;
        logger?.warn({ err }, 'async-queue LISTEN failed; polling meanwhile');
      }
      await session?.close().catch(() => {});
      session = undefined;
      if (stop.signal.aborted) return;
      await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** Math.min(failures, 6))));
    }
  };

  /**
   * Gives the claim of `row` (the op at the head of `k`) to this worker: a fresh token (the
   * fencing token), a lease, one more attempt. `reclaim` is set when the op was already running
   * under a claim whose lease expired (its expiry count goes up; the key stays `running`).
   * With `row` null, the key's head op is fetched and updated in one statement (PostgreSQL,
   * SQLite: UPDATE … RETURNING).
   */
  const grant = async (
    trx: Db,
    k: KeyRow,
    row: OpRow | null,
    at: number,
    { leaseMs, workerId }: ClaimOptions,
    reclaim?: { expiries: number },
  ): Promise<Claim | undefined> => {
    const token = Number(k.token) + 1;
    const set = {
      status: 'running',
      token,
      attempts: sql<number>`attempts + 1`,
      worker: workerId,
      started_at: at,
      ...(reclaim ? { expiries: reclaim.expiries } : {}),
    };
    let claimed: OpRow | undefined;
    if (row) {
      await trx.updateTable(OPS).set(set).where('id', '=', row.id).execute();
      claimed = { ...row, ...set, attempts: Number(row.attempts) + 1 } as OpRow;
    } else {
      // The head op: every change to a key's ops happens under the key row lock held here.
      claimed = (await trx
        .updateTable(OPS)
        .set(set)
        .where(
          'id',
          '=',
          trx
            .selectFrom(OPS)
            .select('id')
            .where('queue', '=', name)
            .where('op_key', '=', k.op_key)
            .where('status', '=', 'queued')
            .orderBy('seq')
            .limit(1),
        )
        .returningAll()
        .executeTakeFirst()) as OpRow | undefined;
    }
    if (!claimed) {
      await markIdle(trx, k.op_key);
      return undefined;
    }
    await trx
      .updateTable(KEYS)
      .set(
        reclaim
          ? { token, lease_until: at + leaseMs, turn: at }
          : {
              state: 'running',
              running_op: claimed.id,
              running_type: claimed.type,
              token,
              lease_until: at + leaseMs,
              pending: sql`pending - 1`,
            },
      )
      .where('queue', '=', name)
      .where('op_key', '=', k.op_key)
      .execute();
    return { op: toInfo(claimed), token, announce: Number(claimed.announce) === 1 };
  };

  const claimWithin = async (
    trx: Db,
    options: ClaimOptions,
  ): Promise<{ claims: Claim[]; poisoned: Completion[] }> => {
    const { limit, leaseMs, key, maxLeaseExpiries, stopOnPoison } = options;
    const at = now();
    const claims: Claim[] = [];
    const poisoned: Completion[] = [];
    const pick = async (state: 'running' | 'ready', n: number) => {
      let q = trx.selectFrom(KEYS).selectAll().where('queue', '=', name).where('state', '=', state);
      q = state === 'running' ? q.where('lease_until', '<', at) : q.where('avail_at', '<=', at);
      if (key !== undefined) q = q.where('op_key', '=', key);
      q = q.orderBy('turn').orderBy('op_key').limit(n);
      if (locking) q = q.forUpdate().skipLocked();
      return (await q.execute()) as KeyRow[];
    };
    // Expired leases are rare: look for them at most every `pollMs` (always for one key).
    let expired: KeyRow[] = [];
    if (key !== undefined || expiredCheckDue(leaseMs)) {
      lastExpiredCheck = at;
      expired = await pick('running', limit);
    }
    for (const k of expired) {
      const row = await opRow(trx, k.running_op ?? '');
      if (!row || row.status !== 'running') {
        await advanceKey(trx, k.op_key, at);
        continue;
      }
      const expiries = Number(row.expiries) + 1;
      if (expiries >= maxLeaseExpiries) {
        const error: SerializedError = {
          name: 'QueueError',
          code: 'async-queue.poison',
          message: `op ${row.id} (${row.type}) lost its worker ${expiries} times (lease expired); failed as poison`,
        };
        await trx
          .updateTable(OPS)
          .set({ expiries, token: sql`token + 1` })
          .where('id', '=', row.id)
          .execute();
        poisoned.push(await failOp(trx, row, error, stopOnPoison, at));
        continue;
      }
      const claim = await grant(trx, k, row, at, options, { expiries });
      if (claim) claims.push(claim);
    }
    const ready = claims.length < limit ? await pick('ready', limit - claims.length) : [];
    for (const k of ready) {
      let row: OpRow | null = null;
      if (!returning) {
        const head = await headOp(trx, k.op_key);
        if (!head) {
          await markIdle(trx, k.op_key);
          continue;
        }
        row = head;
      }
      const claim = await grant(trx, k, row, at, options);
      if (claim) claims.push(claim);
    }
    return { claims, poisoned };
  };

  // ---------------------------------------------------------------- PostgreSQL fast paths
  // The hot operations as single statements in autocommit: one round trip instead of five to
  // seven (BEGIN, statements, COMMIT). Locks are taken in the same order as the transactional
  // paths (key row, then op rows). Under READ COMMITTED one statement sees one snapshot, so the
  // claim re-checks op status on update and leaves anything unusual to the transactional path.
  const pg = dialect === 'postgres';

  /** A row of the claim functions: `picked` (a locked key) and its claimed head op, if any. */
  type ClaimedRow = OpRow & { picked: string | null };

  /** Claims from the claim functions' rows; keys picked but not claimed are returned apart. */
  const readClaims = (rows: ClaimedRow[]) => {
    const claims: Claim[] = [];
    const unclaimed: string[] = [];
    for (const r of rows) {
      if (r.picked === null || r.picked === undefined) continue;
      if (r.id === null || r.id === undefined) unclaimed.push(r.picked);
      else
        claims.push({ op: toInfo(r), token: Number(r.token), announce: Number(r.announce) === 1 });
    }
    return { claims, unclaimed };
  };

  /** Picked keys whose head op the single statement could not claim: the transactional path. */
  const claimLeftovers = async (
    options: Omit<ClaimOptions, 'limit' | 'key'>,
    found: { claims: Claim[]; unclaimed: string[] },
  ): Promise<{ claims: Claim[]; poisoned: Completion[] }> => {
    const { claims, unclaimed } = found;
    const poisoned: Completion[] = [];
    for (const key of unclaimed) {
      const more = await tx((trx) => claimWithin(trx, { ...options, key, limit: 1 }));
      claims.push(...more.claims);
      poisoned.push(...more.poisoned);
    }
    return { claims, poisoned };
  };

  /** Fast claim of up to `options.limit` ready head ops. */
  const pgClaim = async (
    options: ClaimOptions,
  ): Promise<{ claims: Claim[]; poisoned: Completion[] }> => {
    const at = now();
    const { rows } = await sql<{ j: ClaimedRow | string }>`
      select ${sql.raw(CLAIM_FN)}(${name}, ${options.limit}, ${at}, ${at + options.leaseMs},
        ${options.workerId}) as j
    `.execute(db);
    const out = rows.map((r) => (typeof r.j === 'string' ? JSON.parse(r.j) : r.j) as ClaimedRow);
    return claimLeftovers(options, readClaims(out));
  };

  /** The row of a newly enqueued op. */
  const newOpRow = (
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

  /** Stores an op (no idempotency key check here) and wakes workers when its key was idle. */
  const pgEnqueue = async (input: EnqueueInput, payload: string, at: number) => {
    const id = randomUUID();
    const { rows } = await sql<{ j: { state: string; next_seq: string | number } | string }>`
      select ${sql.raw(ENQUEUE_FN)}(${name}, ${input.key}, ${id}, ${input.type}, ${payload},
        ${input.idempotencyKey ?? null}::text, ${input.waited ? 1 : 0}, ${at}) as j
    `.execute(db);
    const j = rows[0]!.j;
    const k = (typeof j === 'string' ? JSON.parse(j) : j) as { state: string; next_seq: number };
    const row = newOpRow(id, input, Number(k.next_seq), payload, at);
    return { row, created: true, held: k.state === 'blocked' };
  };

  /** A success waiting to be recorded with others that arrive meanwhile. */
  interface SucceedItem {
    claim: Claim;
    result: unknown;
    text: string;
    next: Omit<ClaimOptions, 'limit' | 'key'> | undefined;
    resolve: (c: Completion | undefined) => void;
    reject: (error: unknown) => void;
  }
  const succeeding: SucceedItem[] = [];
  let succeedBatches = 0;

  /**
   * Successes are recorded in batches, like a database's group commit: those that arrive in the
   * same turn of the event loop (handlers that finished together), or while earlier batches are
   * being recorded, go together in one statement (PostgreSQL) or transaction — one commit for
   * many ops. The first waits for no timer, only for the end of the current turn.
   */
  let flushScheduled = false;
  const pumpSucceed = () => {
    if (flushScheduled) return;
    flushScheduled = true;
    setImmediate(flushSucceed);
  };
  const flushSucceed = () => {
    flushScheduled = false;
    while (succeedBatches < MAX_SUCCEED_BATCHES && succeeding.length > 0) {
      const items = succeeding.splice(0, SUCCEED_BATCH);
      succeedBatches++;
      void succeedMany(items)
        .then(
          (out) => items.forEach((it, i) => it.resolve(out[i])),
          (error: unknown) => items.forEach((it) => it.reject(error)),
        )
        .finally(() => {
          succeedBatches--;
          if (succeeding.length > 0) pumpSucceed();
        });
    }
  };

  const succeeded = (it: SucceedItem, at: number): Completion => ({
    op: { ...it.claim.op, status: 'succeeded' as const, result: it.result, finishedAt: at },
    cancelled: [],
    blocked: false,
  });

  /**
   * Hands the ops claimed for a batch to the accepted successes that asked for one (at most one
   * each: it takes over that op's slot); poisoned completions go with the first.
   */
  const handOut = (
    out: (Completion | undefined)[],
    items: SucceedItem[],
    chained: { claims: Claim[]; poisoned: Completion[] } | undefined,
  ) => {
    if (!chained) return out;
    let i = 0;
    let poisoned = chained.poisoned;
    for (let j = 0; j < items.length; j++) {
      const c = out[j];
      if (!c || !items[j]!.next) continue;
      const claim = chained.claims[i++];
      c.next = { claims: claim ? [claim] : [], poisoned };
      poisoned = [];
    }
    return out;
  };

  const succeedMany = async (items: SucceedItem[]): Promise<(Completion | undefined)[]> => {
    const wanted = closed ? undefined : items.find((it) => it.next)?.next;
    if (closed) for (const it of items) it.next = undefined;
    // A chained claim also looks for expired leases now and then: transactional path.
    if (pg && !(wanted && expiredCheckDue(wanted.leaseMs))) {
      return pgSucceedMany(items, now(), wanted);
    }
    return tx(async (trx) => {
      const at = now();
      const out: (Completion | undefined)[] = [];
      let want = 0;
      // Key rows are locked in key order, so that two batches cannot deadlock.
      const order = items.map((_, i) => i);
      const keyOf = (i: number) => items[i]!.claim.op.key;
      order.sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : a - b));
      for (const i of order) {
        const it = items[i]!;
        const { claim } = it;
        // Advance the key only if this claim still holds it (fencing token): one statement
        // checks and locks. The state always changes, so MySQL counts the row as updated.
        if (!(await advanceKey(trx, claim.op.key, at, claim))) continue;
        await trx
          .updateTable(OPS)
          .set({ status: 'succeeded', result: it.text, error: null, finished_at: at })
          .where('id', '=', claim.op.id)
          .execute();
        if (claim.announce) await pgNotify(trx, `d:${name}:${claim.op.id}`);
        out[i] = succeeded(it, at);
        if (it.next) want++;
      }
      // Claim the next fair keys in the same transaction: one transaction per batch, not two.
      const chained =
        want > 0 && wanted ? await claimWithin(trx, { ...wanted, limit: want }) : undefined;
      return handOut(out, items, chained);
    });
  };

  /** One statement: every success of the batch (each fenced) and the chained claims. */
  const pgSucceedMany = async (
    items: SucceedItem[],
    at: number,
    next: Omit<ClaimOptions, 'limit' | 'key'> | undefined,
  ): Promise<(Completion | undefined)[]> => {
    const { rows } = await sql<{ j: unknown }>`
      select ${sql.raw(SUCCEED_MANY_FN)}(${name},
        ${items.map((it) => it.claim.op.key)}::text[],
        ${items.map((it) => it.claim.op.id)}::text[],
        ${items.map((it) => it.claim.token)}::integer[],
        ${items.map((it) => it.text)}::text[],
        ${items.map((it) => (it.claim.announce ? `d:${name}:${it.claim.op.id}` : null))}::text[],
        ${items.map((it) => it.next !== undefined)}::boolean[],
        ${at}, ${at + (next?.leaseMs ?? 0)}, ${next?.workerId ?? ''}) as j
    `.execute(db);
    const out: (Completion | undefined)[] = [];
    const parsed = rows.map((r) => (typeof r.j === 'string' ? JSON.parse(r.j) : r.j));
    const head = parsed.shift() as { ok: (number | string)[] } | undefined;
    let want = 0;
    for (const ord of head?.ok ?? []) {
      const i = Number(ord) - 1;
      out[i] = succeeded(items[i]!, at);
      if (items[i]!.next) want++;
    }
    const chained =
      want > 0 && next ? await claimLeftovers(next, readClaims(parsed as ClaimedRow[])) : undefined;
    return handOut(out, items, chained);
  };

  const backend: QueueBackend = {
    kind: `sql:${dialect}`,
    durable: true,
    pollMs,

    async attach(context) {
      ctx = context;
      clock = context.clock;
      logger = context.logger;
      await database.migrate('async-queue', migrations);
      me = { wake: () => context.wake(), settled: (id) => context.settled(id) };
      neighbours.add(me);
      if (notify) listenLoop = listen();
    },

    async enqueue(input: EnqueueInput) {
      const at = now();
      const payload = JSON.stringify(input.payload ?? null);
      const run = () =>
        tx(async (trx) => {
          if (input.idempotencyKey !== undefined) {
            const existing = (await trx
              .selectFrom(OPS)
              .selectAll()
              .where('queue', '=', name)
              .where('idempotency_key', '=', input.idempotencyKey)
              .executeTakeFirst()) as OpRow | undefined;
            if (existing) return { row: existing, created: false, held: undefined };
          }
          // One upsert counts the op in and readies an idle key (and locks the key row, which
          // serializes enqueues of one key). SET expressions are ordered for MySQL, which
          // evaluates them left to right with the updated values.
          const K = (c: string) => sql.ref(`${KEYS}.${c}`);
          const wasIdleSql = sql`${K('state')} = 'idle'`;
          const bump = {
            next_seq: sql<number>`${K('next_seq')} + 1`,
            pending: sql<number>`${K('pending')} + 1`,
            avail_at: sql<number>`case when ${wasIdleSql} then 0 else ${K('avail_at')} end`,
            turn: sql<number>`case when ${wasIdleSql} then ${at} else ${K('turn')} end`,
            state: sql<string>`case when ${wasIdleSql} then 'ready' else ${K('state')} end`,
          };
          const insert = trx.insertInto(KEYS).values({
            queue: name,
            op_key: input.key,
            state: 'ready',
            next_seq: 1,
            pending: 1,
            avail_at: 0,
            turn: at,
          });
          let k: Pick<KeyRow, 'state' | 'next_seq' | 'pending'>;
          if (dialect === 'mysql') {
            await insert.onDuplicateKeyUpdate(bump).execute();
            k = (await keyRow(trx, input.key, false))!;
          } else {
            k = (await insert
              .onConflict((oc) => oc.columns(['queue', 'op_key']).doUpdateSet(bump))
              .returning(['state', 'next_seq', 'pending'])
              .executeTakeFirstOrThrow()) as KeyRow;
          }
          const seq = Number(k.next_seq);
          const row = newOpRow(randomUUID(), input, seq, payload, at);
          await trx.insertInto(OPS).values(row).execute();
          // `ready` with this op as the only pending one: the key was idle (or is new).
          if (k.state === 'ready' && Number(k.pending) === 1) await pgNotify(trx, `n:${name}`);
          return { row, created: true, held: k.state === 'blocked' };
        });
      let out: { row: OpRow; created: boolean; held?: boolean | undefined };
      const attempt = async () => {
        if (!pg) return run();
        if (input.idempotencyKey !== undefined) {
          const existing = (await db
            .selectFrom(OPS)
            .selectAll()
            .where('queue', '=', name)
            .where('idempotency_key', '=', input.idempotencyKey)
            .executeTakeFirst()) as OpRow | undefined;
          if (existing) return { row: existing, created: false, held: undefined };
        }
        return pgEnqueue(input, payload, at);
      };
      try {
        out = await attempt();
      } catch (error) {
        if (input.idempotencyKey === undefined || !isUniqueViolation(error)) throw error;
        out = await attempt();
      }
      const { row, created } = out;
      const held =
        out.held ??
        (row.status === 'queued' && (await keyRow(db, row.op_key, false))?.state === 'blocked');
      if (created) wakeLocal();
      if (!created && (row.op_key !== input.key || row.type !== input.type)) {
        throw new QueueError(
          'async-queue.idempotency_conflict',
          `idempotency key '${input.idempotencyKey}' was used for op ${row.id} (key '${row.op_key}', type '${row.type}'), not key '${input.key}', type '${input.type}'`,
          { details: { id: row.id, key: row.op_key, type: row.type } },
        );
      }
      return { op: toInfo(row, held), created };
    },

    async claim(options) {
      if (options.limit <= 0) return { claims: [], poisoned: [] };
      // Expired leases are looked for by the transactional path, at most every `pollMs`.
      if (pg && options.key === undefined && !expiredCheckDue(options.leaseMs)) {
        return pgClaim(options);
      }
      return tx((trx) => claimWithin(trx, options));
    },

    async heartbeat(claims, leaseMs) {
      const lost = new Set<Claim>();
      const until = now() + leaseMs;
      if (returning) {
        // One statement per 100 claims: each lease is extended only while its claim holds the
        // key (fencing token); a claim whose row did not come back is lost.
        for (let i = 0; i < claims.length; i += 100) {
          const chunk = claims.slice(i, i + 100);
          // Still held by these claims (fencing token), and still running.
          const stillHeld = (eb: ExpressionBuilder<any, any>): Expression<SqlBool> =>
            eb.and([
              eb('queue', '=', name),
              eb('state', '=', 'running'),
              eb.or(
                chunk.map((c) =>
                  eb.and([
                    eb('op_key', '=', c.op.key),
                    eb('running_op', '=', c.op.id),
                    eb('token', '=', c.token),
                  ]),
                ),
              ),
            ]);
          // PostgreSQL: the key rows are locked in key order first, as every other statement that
          // locks several keys does (a batch of successes), so the two cannot deadlock (one plain
          // UPDATE locks rows in scan order; each such deadlock cost a second and a statement).
          const rows = (
            pg
              ? await db
                  .with('l', (qb) =>
                    qb
                      .selectFrom(KEYS)
                      .select('op_key')
                      .where(stillHeld)
                      .orderBy('op_key')
                      .forUpdate(),
                  )
                  .updateTable(KEYS)
                  .set({ lease_until: until })
                  .from('l')
                  .whereRef(`${KEYS}.op_key`, '=', 'l.op_key')
                  .where(`${KEYS}.queue`, '=', name)
                  .returning([`${KEYS}.running_op`, `${KEYS}.token`])
                  .execute()
              : await db
                  .updateTable(KEYS)
                  .set({ lease_until: until })
                  .where(stillHeld)
                  .returning(['running_op', 'token'])
                  .execute()
          ) as { running_op: string; token: number | string }[];
          const held = new Set(rows.map((r) => `${r.running_op}:${Number(r.token)}`));
          for (const c of chunk) if (!held.has(`${c.op.id}:${c.token}`)) lost.add(c);
        }
        return lost;
      }
      for (const c of claims) {
        const r = await db
          .updateTable(KEYS)
          .set({ lease_until: until })
          .where('queue', '=', name)
          .where('op_key', '=', c.op.key)
          .where('running_op', '=', c.op.id)
          .where('token', '=', c.token)
          .where('state', '=', 'running')
          .executeTakeFirst();
        if (Number(r.numUpdatedRows) === 0) {
          // MySQL reports 0 changed rows when the value did not change: check by reading.
          const k = await keyRow(db, c.op.key, false);
          if (!k || k.running_op !== c.op.id || Number(k.token) !== c.token) lost.add(c);
        }
      }
      return lost;
    },

    succeed(claim, result, next) {
      return new Promise<Completion | undefined>((resolve, reject) => {
        succeeding.push({
          claim,
          result,
          text: JSON.stringify(result ?? null),
          next,
          resolve,
          reject,
        });
        pumpSucceed();
      });
    },
    async fail(claim, error, outcome: FailOutcome) {
      return tx(async (trx) => {
        if (!(await holdsClaim(trx, claim))) return undefined;
        const at = now();
        const row = (await opRow(trx, claim.op.id))!;
        if ('retryAt' in outcome) {
          await trx
            .updateTable(OPS)
            .set({ status: 'queued', error: JSON.stringify(error) })
            .where('id', '=', row.id)
            .execute();
          await trx
            .updateTable(KEYS)
            .set({
              state: 'ready',
              avail_at: outcome.retryAt,
              pending: sql`pending + 1`,
              running_op: null,
              running_type: null,
            })
            .where('queue', '=', name)
            .where('op_key', '=', row.op_key)
            .execute();
          return {
            op: toInfo({ ...row, status: 'queued', error: JSON.stringify(error) }),
            cancelled: [],
            blocked: false,
          };
        }
        const c = await failOp(trx, row, error, outcome.stop, at);
        if (claim.announce || c.cancelled.length > 0) await pgNotify(trx, `d:${name}:${row.id}`);
        for (const x of c.cancelled) await pgNotify(trx, `d:${name}:${x.id}`);
        return c;
      });
    },

    async release(claim) {
      return tx(async (trx) => {
        if (!(await holdsClaim(trx, claim))) return false;
        const token = claim.token + 1;
        await trx
          .updateTable(OPS)
          .set({ status: 'queued', token })
          .where('id', '=', claim.op.id)
          .execute();
        await trx
          .updateTable(KEYS)
          .set({
            state: 'ready',
            avail_at: 0,
            pending: sql`pending + 1`,
            running_op: null,
            running_type: null,
            token,
          })
          .where('queue', '=', name)
          .where('op_key', '=', claim.op.key)
          .execute();
        await pgNotify(trx, `n:${name}`);
        return true;
      });
    },

    async resume(key) {
      return tx(async (trx) => {
        const k = await keyRow(trx, key, true);
        if (!k || k.state !== 'blocked') return false;
        await trx
          .updateTable(KEYS)
          .set({ blocked_by: null, avail_at: 0, turn: now() })
          .set({ state: sql`case when pending > 0 then 'ready' else 'idle' end` })
          .where('queue', '=', name)
          .where('op_key', '=', key)
          .execute();
        await pgNotify(trx, `n:${name}`);
        return true;
      });
    },

    async discard(key) {
      return tx(async (trx) => {
        const k = await keyRow(trx, key, true);
        if (!k) return [];
        const cancelled = await cancelQueued(trx, key, 'discard', now());
        await trx
          .updateTable(KEYS)
          .set({
            pending: 0,
            blocked_by: null,
            state: k.state === 'running' ? 'running' : 'idle',
          })
          .where('queue', '=', name)
          .where('op_key', '=', key)
          .execute();
        for (const x of cancelled) await pgNotify(trx, `d:${name}:${x.id}`);
        return cancelled;
      });
    },

    async get(id) {
      const row = await opRow(db, id);
      if (!row || row.queue !== name) return undefined;
      const held =
        row.status === 'queued' && (await keyRow(db, row.op_key, false))?.state === 'blocked';
      return toInfo(row, held);
    },

    async inspect(key): Promise<KeyInfo> {
      const k = await keyRow(db, key, false);
      const status = await statusOf(db, k);
      const rows = (await db
        .selectFrom(OPS)
        .selectAll()
        .where('queue', '=', name)
        .where('op_key', '=', key)
        .where('status', 'in', ['queued', 'running'])
        .orderBy('seq')
        .execute()) as OpRow[];
      const running = rows.find((r) => r.status === 'running');
      const blocked = k?.state === 'blocked';
      const pending = rows.filter((r) => r.status === 'queued').map((r) => toInfo(r, blocked));
      return {
        key,
        status,
        blockedBy: k?.blocked_by ?? undefined,
        running: running ? toInfo(running) : undefined,
        pending,
        held: blocked ? pending.length : 0,
      };
    },

    async keyStatus(key) {
      return statusOf(db, await keyRow(db, key, false));
    },

    async activeKeys(limit) {
      const rows = (await db
        .selectFrom(KEYS)
        .selectAll()
        .where('queue', '=', name)
        .where('state', '!=', 'idle')
        .orderBy('op_key')
        .limit(limit)
        .execute()) as KeyRow[];
      const out: { key: string; status: KeyStatus }[] = [];
      for (const k of rows) {
        const status = await statusOf(db, k);
        if (status !== 'idle') out.push({ key: k.op_key, status });
      }
      return out;
    },

    async deadLetters(limit) {
      const rows = (await db
        .selectFrom(OPS)
        .selectAll()
        .where('queue', '=', name)
        .where('status', '=', 'failed')
        .orderBy('finished_at', 'desc')
        .limit(limit)
        .execute()) as OpRow[];
      return rows.map((r) => toInfo(r));
    },

    async prune(retention: RetentionOptions) {
      let n = 0;
      if (retention.maxAgeMs !== undefined) {
        const r = await db
          .deleteFrom(OPS)
          .where('queue', '=', name)
          .where('status', 'in', ['succeeded', 'cancelled', 'failed'])
          .where('finished_at', '<', now() - retention.maxAgeMs)
          .executeTakeFirst();
        n += Number(r.numDeletedRows);
      }
      if (retention.maxCount !== undefined) {
        const edge = (await db
          .selectFrom(OPS)
          .select('finished_at')
          .where('queue', '=', name)
          .where('status', 'in', ['succeeded', 'cancelled'])
          .orderBy('finished_at', 'desc')
          .limit(1)
          .offset(retention.maxCount)
          .executeTakeFirst()) as { finished_at: number | string } | undefined;
        if (edge) {
          const r = await db
            .deleteFrom(OPS)
            .where('queue', '=', name)
            .where('status', 'in', ['succeeded', 'cancelled'])
            .where('finished_at', '<=', Number(edge.finished_at))
            .executeTakeFirst();
          n += Number(r.numDeletedRows);
        }
      }
      return n;
    },

    async nextDueAt() {
      const r = (await db
        .selectFrom(KEYS)
        .select((eb) => eb.fn.min('avail_at').as('due'))
        .where('queue', '=', name)
        .where('state', '=', 'ready')
        .where('avail_at', '>', now())
        .executeTakeFirst()) as { due: number | string | null } | undefined;
      return num(r?.due ?? null);
    },

    async close() {
      if (closed) return;
      closed = true;
      stop.abort();
      if (me) neighbours.delete(me);
      await session?.close().catch(() => {});
      await listenLoop;
    },
  };
  const { succeed, fail, release, resume, discard } = backend;
  backend.succeed = async (claim, result, next) => {
    const c = await succeed(claim, result, next);
    if (c) settledLocal([c.op.id]);
    return c;
  };
  backend.fail = async (claim, error, outcome) => {
    const c = await fail(claim, error, outcome);
    if (c && !('retryAt' in outcome)) settledLocal([c.op.id, ...c.cancelled.map((x) => x.id)]);
    return c;
  };
  backend.release = async (claim) => {
    const released = await release(claim);
    if (released) wakeLocal();
    return released;
  };
  backend.resume = async (key) => {
    const resumed = await resume(key);
    if (resumed) wakeLocal();
    return resumed;
  };
  backend.discard = async (key) => {
    const cancelled = await discard(key);
    settledLocal(cancelled.map((x) => x.id));
    return cancelled;
  };
  return backend;
}
