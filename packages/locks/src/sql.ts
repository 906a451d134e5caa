import { randomUUID } from 'node:crypto';
import type { LockHolder, LockMode } from '@rigging/core';
import type { Database, Migration, Session } from '@rigging/sql';
import { isConnectionError, isRetryableError, sql } from './sql-peer.js';
import { describe, type ProviderBaseOptions } from './common.js';
import {
  Heartbeat,
  HOST,
  RemoteLockProvider,
  holderJson,
  num,
  parseHolder,
  type Backend,
  type Granted,
} from './remote.js';

export type { LockEvents, LockEmitter } from './common.js';

/** Options of {@link sqlLockProvider}. */
export interface SqlLockOptions extends ProviderBaseOptions {
  /** SQLite lease lifetime: a holder that stops renewing loses the lock after this long. @default 10000 */
  ttlMs?: number;
  /**
   * How often leases are renewed (SQLite) and sessions checked with a round trip (PostgreSQL,
   * MySQL). @default ttlMs / 3
   */
  heartbeatMs?: number;
  /** First retry delay while polling (MySQL, SQLite). @default 2 */
  pollMinMs?: number;
  /** Longest retry delay while polling (MySQL, SQLite). @default 50 */
  pollMaxMs?: number;
  /**
   * PostgreSQL waiters are woken by `NOTIFY` on release; a holder that dies sends none, so
   * waiters also retry this often. @default 250
   */
  fallbackPollMs?: number;
  /** Name used in events. @default `sql:<dialect>` */
  name?: string;
}

const CHANNEL = 'rigging_locks';
const OWNER = 'sqlLockProvider';

export const lockMigrations: readonly Migration[] = [
  {
    name: 'tokens-and-leases',
    async up(db) {
      await sql`create table if not exists rigging_locks_tokens (
        lock_id varchar(64) primary key,
        lock_key text not null,
        token bigint not null,
        holder text,
        since bigint
      )`.execute(db);
      await sql`create table if not exists rigging_locks_leases (
        lock_id varchar(64) not null,
        lease_id varchar(64) not null,
        lock_key text not null,
        mode varchar(16) not null,
        token bigint not null,
        expires_at bigint not null,
        pid integer,
        host text,
        since bigint not null,
        primary key (lock_id, lease_id)
      )`.execute(db);
    },
  },
  {
    // PostgreSQL grants take tokens from a sequence and write nothing; who holds what is kept in
    // unlogged tables (lost on a server crash, like the locks themselves)
    name: 'pg-token-sequence',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql`create sequence if not exists rigging_locks_token_seq as bigint`.execute(db);
      // above every token handed out before, and never below the server clock in microseconds
      await sql`select setval('rigging_locks_token_seq', greatest(
        (select coalesce(max(token), 0) from rigging_locks_tokens),
        floor(extract(epoch from clock_timestamp()) * 1000000)::bigint))`.execute(db);
      await sql`create unlogged table if not exists rigging_locks_pg_sessions (
        backend integer primary key,
        holder text not null,
        opened bigint not null
      )`.execute(db);
      await sql`create unlogged table if not exists rigging_locks_pg_holders (
        lock_id bigint not null,
        backend integer not null,
        token bigint not null,
        since bigint not null,
        primary key (lock_id, backend, token)
      )`.execute(db);
      await sql`create table if not exists rigging_locks_pg_epoch (
        id integer primary key,
        started timestamptz not null
      )`.execute(db);
    },
  },
];

// ---------------------------------------------------------------------------------------------
// Session-based backends (PostgreSQL advisory locks, MySQL GET_LOCK)

abstract class SessionBackend implements Backend {
  protected database: Database;
  #session: Promise<{ session: Session; lost: AbortController }> | undefined;
  readonly #heartbeat: Heartbeat;
  #grants = 0;
  #closed = false;

  constructor(database: Database, heartbeatMs: number) {
    this.database = database;
    this.#heartbeat = new Heartbeat(
      heartbeatMs,
      () => this.#grants > 0,
      () => this.#beat(),
    );
  }

  abstract localMode(mode: LockMode): LockMode;
  abstract tryGrant(
    key: string,
    id: string,
    mode: LockMode,
    waiting: boolean,
  ): Promise<Granted | undefined>;
  abstract holder(key: string, id: string): Promise<LockHolder | undefined>;
  protected onOpen(_session: Session): Promise<void> {
    return Promise.resolve();
  }
  protected onLost(): void {}

  /** The open session once it is ready (grants skip awaiting `session()` then). */
  protected current: { session: Session; lost: AbortController } | undefined;

  protected session(): Promise<{ session: Session; lost: AbortController }> {
    if (this.#closed) return Promise.reject(new Error('lock provider is closed'));
    this.#session ??= (async () => {
      const session = await this.database.session();
      const lost = new AbortController();
      const onLost = () => {
        lost.abort(session.lost.reason);
        this.#session = undefined;
        this.current = undefined;
        this.onLost();
      };
      session.lost.addEventListener('abort', onLost, { once: true });
      lost.signal.addEventListener('abort', () => {
        if (this.current?.lost === lost) this.current = undefined;
        if (this.#session && !session.lost.aborted) {
          this.#session = undefined;
          void session.close();
          this.onLost();
        }
      });
      await this.onOpen(session);
      const opened = { session, lost };
      if (!lost.signal.aborted && !this.#closed) this.current = opened;
      return opened;
    })().catch((error: unknown) => {
      this.#session = undefined;
      throw error;
    });
    return this.#session;
  }

  /** Counts a grant for the heartbeat (a round trip every heartbeatMs while anything is held). */
  protected held(delta: 1 | -1): void {
    this.#grants += delta;
    // started on demand; it stops itself at a tick with nothing held (no timer churn per grant)
    this.#heartbeat.start();
  }

  async #beat(): Promise<void> {
    const current = this.#session;
    if (!current) return;
    let s: { session: Session; lost: AbortController };
    try {
      s = await current;
    } catch {
      return;
    }
    const timer = setTimeout(
      () => s.lost.abort(new Error('session heartbeat timed out')),
      this.#heartbeat.ms * 2,
    );
    try {
      await s.session.query('select 1');
    } catch (error) {
      s.lost.abort(error);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#heartbeat.stop();
    const current = this.#session;
    this.#session = undefined;
    this.current = undefined;
    if (current) {
      const s = await current.catch(() => undefined);
      // the server frees the session's locks when it closes: say so to the holders first
      s?.lost.abort(new Error('lock provider closed'));
      await s?.session.close();
    }
  }
}

const split = new Map<string, { big: string; hi: number; lo: number }>();

/** The advisory lock ids of a lock id: one bigint, and two ints for waiter announcements. */
function split64(id: string): { big: string; hi: number; lo: number } {
  let parts = split.get(id);
  if (parts === undefined) {
    const buf = Buffer.from(id.slice(0, 16), 'hex');
    parts = {
      big: buf.readBigInt64BE(0).toString(),
      hi: buf.readUInt32BE(0),
      lo: buf.readUInt32BE(4),
    };
    if (split.size >= 4096) split.clear();
    split.set(id, parts);
  }
  return parts;
}

/** A lease held this long gets its `since` recorded for `holder()` (short holds write nothing). */
const PG_RECORD_AFTER_MS = 50;

/** A PostgreSQL grant whose `since` is not recorded yet (see PG_RECORD_AFTER_MS). */
interface PgGrant {
  session: Session;
  big: string;
  token: string;
  since: number;
  /** Set once the record insert was sent: resolves true when the row was written. */
  recorded: Promise<boolean> | undefined;
}

class PostgresBackend extends SessionBackend {
  #wakers = new Map<string, Set<() => void>>();
  /** Grants younger than PG_RECORD_AFTER_MS, checked by one timer (no timer per grant). */
  #young = new Set<PgGrant>();
  #recordTimer: ReturnType<typeof setTimeout> | undefined;

  #armRecord(ms: number): void {
    this.#recordTimer = setTimeout(() => this.#recordOld(), ms);
    this.#recordTimer.unref();
  }

  /** Leases held PG_RECORD_AFTER_MS record their `since` for holder(); brief ones never write. */
  #recordOld(): void {
    this.#recordTimer = undefined;
    const now = Date.now();
    let next = Infinity;
    for (const g of this.#young) {
      const age = now - g.since;
      if (age < PG_RECORD_AFTER_MS) {
        next = Math.min(next, PG_RECORD_AFTER_MS - age);
        continue;
      }
      this.#young.delete(g);
      g.recorded = g.session
        .query(
          `insert into rigging_locks_pg_holders (lock_id, backend, token, since)
           values (${g.big}, pg_backend_pid(), ${g.token}, ${g.since}) on conflict do nothing`,
        )
        .then(
          () => true,
          () => false,
        );
    }
    if (next !== Infinity) this.#armRecord(Math.max(1, next));
  }

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  protected override async onOpen(session: Session): Promise<void> {
    // Grants write nothing; the sequence logs ahead every 32 values and need not wait for the
    // flush: a server restart (crash, failover) is detected below and the sequence moved past
    // the server clock in microseconds, so tokens never repeat (with a sane clock).
    await session.query('set synchronous_commit = off');
    const check = await session.query<{ restarted: boolean }>(
      `select (select started from rigging_locks_pg_epoch where id = 1)
                is distinct from pg_postmaster_start_time() as restarted`,
    );
    if (check.rows[0]?.restarted) await this.#afterRestart(session);
    // who this session is, for holder() (an unlogged table: no WAL, nothing to flush)
    await session.query(
      `insert into rigging_locks_pg_sessions as s (backend, holder, opened)
       values (pg_backend_pid(), $1, $2)
       on conflict (backend) do update set holder = excluded.holder, opened = excluded.opened`,
      [holderJson(), Date.now()],
    );
    // the grant and the release, prepared once per session: each call is then an `execute` on the
    // simple protocol (one round trip, nothing to parse or plan)
    for (const [name, lock] of [
      ['x', 'pg_try_advisory_lock'],
      ['s', 'pg_try_advisory_lock_shared'],
    ] as const) {
      // CASE orders the two: the next token is taken only once the lock is granted
      await session.query(
        `prepare rigging_locks_grant_${name}(int8) as
         select (case when ${lock}($1) then nextval('rigging_locks_token_seq') end)::text as token`,
      );
    }
    for (const [name, unlock] of [
      ['x', 'pg_advisory_unlock'],
      ['s', 'pg_advisory_unlock_shared'],
    ] as const) {
      // NOTIFY only when another session announced a waiter (a shared lock in the two-int key
      // space, which does not overlap the bigint one); the probe is transaction-scoped. CASE
      // evaluates its conditions in order (unlock first) and the result is one column.
      await session.query(
        `prepare rigging_locks_release_${name}(int8, int4, int4) as
         select case when ${unlock}($1) is null then null
                     when pg_try_advisory_xact_lock($2, $3) then null
                     else pg_notify('${CHANNEL}', $1::text) end as notified`,
      );
    }
    session.onNotification((n) => {
      if (n.channel !== CHANNEL || n.payload === undefined) return;
      const set = this.#wakers.get(n.payload);
      if (set) for (const wake of [...set]) wake();
    });
    await session.query(`listen ${CHANNEL}`);
  }

  protected override onLost(): void {
    this.#young.clear(); // their session is gone, and with it their locks
    for (const set of this.#wakers.values()) for (const wake of [...set]) wake();
  }

  /** Once per server start (whoever sees it first, under a table lock, durably). */
  async #afterRestart(session: Session): Promise<void> {
    await session.query('begin');
    try {
      await session.query('set local synchronous_commit = on');
      await session.query('lock table rigging_locks_pg_epoch in exclusive mode');
      const changed = await session.query(
        `insert into rigging_locks_pg_epoch as e (id, started) values (1, pg_postmaster_start_time())
         on conflict (id) do update set started = excluded.started
           where e.started is distinct from excluded.started
         returning id`,
      );
      if (changed.rows.length > 0) {
        await session.query(
          `select setval('rigging_locks_token_seq', greatest(
             (select last_value from rigging_locks_token_seq),
             floor(extract(epoch from clock_timestamp()) * 1000000)::bigint))`,
        );
      }
      await session.query('commit');
    } catch (error) {
      await session.query('rollback').catch(() => undefined);
      throw error;
    }
  }

  subscribe(id: string, wake: () => void): () => void {
    const { big } = split64(id);
    let set = this.#wakers.get(big);
    if (!set) this.#wakers.set(big, (set = new Set()));
    set.add(wake);
    return () => {
      set.delete(wake);
      if (set.size === 0 && this.#wakers.get(big) === set) this.#wakers.delete(big);
    };
  }

  async beginWait(id: string): Promise<(() => Promise<void>) | undefined> {
    const { session, lost } = this.current ?? (await this.session());
    const { hi, lo } = split64(id);
    // never block the session: a releaser holds the exclusive side for one statement only, so
    // on failure the caller simply tries to announce again after its next (fallback) sleep
    const r = await session.query<{ ok: boolean }>(
      `select pg_try_advisory_lock_shared(${hi | 0}, ${lo | 0}) as ok`,
    );
    if (!r.rows[0]?.ok) return undefined;
    let ended = false;
    return async () => {
      if (ended || lost.signal.aborted) return;
      ended = true;
      await session
        .query(`select pg_advisory_unlock_shared(${hi | 0}, ${lo | 0})`)
        .catch(() => undefined);
    };
  }

  async tryGrant(_key: string, id: string, mode: LockMode): Promise<Granted | undefined> {
    const { session, lost } = this.current ?? (await this.session());
    const { big, hi, lo } = split64(id);
    const shared = mode === 'shared';
    // One round trip, no write: the prepared statement takes the lock and, once granted, the next
    // value of the token sequence (global, so strictly increasing per key)
    const r = await session.query<{ token: string | null }>(
      `execute rigging_locks_grant_${shared ? 's' : 'x'}(${big})`,
    );
    const token = r.rows[0]?.token;
    if (token === null || token === undefined) return undefined;
    const since = Date.now();
    this.held(1);
    const unlock = shared ? 'pg_advisory_unlock_shared' : 'pg_advisory_unlock';
    const releaseStatement = `execute rigging_locks_release_${shared ? 's' : 'x'}(${big}, ${hi | 0}, ${lo | 0})`;
    let released = false;
    const grant: PgGrant = { session, big, token, since, recorded: undefined };
    this.#young.add(grant);
    if (this.#recordTimer === undefined) this.#armRecord(PG_RECORD_AFTER_MS);
    return {
      token: BigInt(token),
      lost: lost.signal,
      release: async () => {
        if (released) return;
        released = true;
        this.#young.delete(grant);
        this.held(-1);
        if (lost.signal.aborted) return;
        if (grant.recorded !== undefined && (await grant.recorded)) {
          await session.query(
            `with d as (delete from rigging_locks_pg_holders
                         where lock_id = ${big} and backend = pg_backend_pid() and token = ${token})
             select ${unlock}(${big}),
                    case when pg_try_advisory_xact_lock(${hi | 0}, ${lo | 0}) then null
                         else pg_notify('${CHANNEL}', '${big}') end`,
          );
        } else await session.query(releaseStatement);
        // waiters of this process on the same key retry at once
        const set = this.#wakers.get(big);
        if (set) for (const wake of [...set]) wake();
      },
    };
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const { session } = await this.session();
    const { big, hi, lo } = split64(id);
    const rows = (
      await session.query<{
        mode: string;
        pid: number;
        holder: string | null;
        since: string | null;
      }>(
        `select l.mode, l.pid, s.holder,
                (select min(h.since) from rigging_locks_pg_holders h
                  where h.lock_id = ${big} and h.backend = l.pid and h.since >= s.opened)::text as since
           from pg_locks l left join rigging_locks_pg_sessions s on s.backend = l.pid
          where l.locktype = 'advisory' and l.granted and l.objsubid = 1
            and l.classid = ${hi}::bigint::oid and l.objid = ${lo}::bigint::oid`,
      )
    ).rows;
    if (rows.length === 0) return undefined;
    // the oldest recorded grant; a grant younger than the recording delay has no row: "now"
    let first = rows[0]!;
    for (const row of rows) {
      if (row.since !== null && (first.since === null || Number(row.since) < Number(first.since)))
        first = row;
    }
    return {
      mode: first.mode === 'ShareLock' ? 'shared' : 'exclusive',
      since: first.since !== null ? Number(first.since) : Date.now(),
      ...parseHolder(first.holder),
      owner: `backend ${first.pid}`,
      count: rows.length,
    };
  }
}

/** Reader slots per MySQL lock: at most this many sessions hold one key shared at once. */
const MYSQL_SLOTS = 32;

/**
 * MySQL/MariaDB named locks (`GET_LOCK`) are exclusive only; shared mode is built from them, all
 * held by the provider's session (so the server frees them when the session dies):
 * - a gate `rl_<id>`: an exclusive holder holds it; a reader holds it only while it takes a slot;
 * - reader slots `rs<n>_<id>`: each session holding the key shared holds one slot.
 * A writer takes the gate (new readers then fail fast) and is granted once every slot is free; it
 * keeps the gate while it waits for readers to leave, so readers cannot starve it.
 */
class MysqlBackend extends SessionBackend {
  /** Keys whose gate this session holds for a writer still waiting for readers to leave. */
  #pending = new Set<string>();

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  protected override onLost(): void {
    this.#pending.clear(); // the gates went with the session
  }

  #gate(id: string): string {
    return `rl_${id.slice(0, 60)}`;
  }

  #slots(id: string): string[] {
    return Array.from({ length: MYSQL_SLOTS }, (_, i) => `rs${i}_${id.slice(0, 58)}`);
  }

  async beginWait(id: string): Promise<(() => Promise<void>) | undefined> {
    await Promise.resolve();
    return async () => {
      // the writer gave up (or was granted, which already took it out of #pending)
      if (!this.#pending.delete(id)) return;
      const { session } = await this.session().catch(() => ({ session: undefined }));
      await session?.query('select release_lock(?)', [this.#gate(id)]).catch(() => undefined);
    };
  }

  async tryGrant(
    key: string,
    id: string,
    mode: LockMode,
    waiting: boolean,
  ): Promise<Granted | undefined> {
    return mode === 'exclusive' ? this.#tryExclusive(key, id, waiting) : this.#tryShared(key, id);
  }

  async #tryExclusive(key: string, id: string, waiting: boolean): Promise<Granted | undefined> {
    const { session, lost } = this.current ?? (await this.session());
    const gate = this.#gate(id);
    const slots = this.#slots(id);
    const allFree = slots.map(() => 'coalesce(is_free_lock(?), 0) = 1').join(' and ');
    let free: boolean;
    if (this.#pending.has(id)) {
      const r = await session.query<{ free: number | string | null }>(
        `select (${allFree}) as free`,
        slots,
      );
      free = Number(r.rows[0]?.free) === 1;
    } else {
      // CASE orders the two: the slots are looked at only once the gate is ours
      const r = await session.query<{ state: number | string | null }>(
        `select case when get_lock(?, 0) = 1 then (${allFree}) else -1 end as state`,
        [gate, ...slots],
      );
      const state = Number(r.rows[0]?.state);
      if (state === -1 || Number.isNaN(state)) return undefined;
      free = state === 1;
      if (!free) this.#pending.add(id);
    }
    if (!free) {
      if (!waiting && this.#pending.delete(id)) {
        await session.query('select release_lock(?)', [gate]);
      }
      return undefined;
    }
    this.#pending.delete(id);
    let token: bigint;
    try {
      token = await this.#token(session, key, id);
    } catch (error) {
      await session.query('select release_lock(?)', [gate]).catch(() => undefined);
      throw error;
    }
    return this.#granted(session, lost, token, gate);
  }

  async #tryShared(key: string, id: string): Promise<Granted | undefined> {
    const { session, lost } = this.current ?? (await this.session());
    const gate = this.#gate(id);
    const slots = this.#slots(id);
    const r = await session.query<Record<string, number | string | null>>(
      `select get_lock(?, 0) as g, ${slots.map((_, i) => `is_used_lock(?) as s${i}`).join(', ')}`,
      [gate, ...slots],
    );
    const row = r.rows[0];
    if (Number(row?.g) !== 1) return undefined; // a writer holds or waits for the key
    let slot: string | undefined;
    try {
      // a slot nobody uses, or the one this session uses already (named locks are re-entrant)
      const start = Math.floor(Math.random() * MYSQL_SLOTS);
      for (let n = 0; n < MYSQL_SLOTS && !slot; n++) {
        const i = (start + n) % MYSQL_SLOTS;
        const used = row?.[`s${i}`];
        if (used === null || used === undefined || Number(used) === session.id) {
          const got = await session.query<{ ok: number | string | null }>(
            'select get_lock(?, 0) as ok',
            [slots[i]],
          );
          if (Number(got.rows[0]?.ok) === 1) slot = slots[i];
        }
      }
    } finally {
      // the slot keeps writers out from now on; the gate was only needed to take it
      await session.query('select release_lock(?)', [gate]);
    }
    if (!slot) return undefined; // every slot is taken by other sessions: wait like for a writer
    let token: bigint;
    try {
      token = await this.#token(session, key, id);
    } catch (error) {
      await session.query('select release_lock(?)', [slot]).catch(() => undefined);
      throw error;
    }
    return this.#granted(session, lost, token, slot);
  }

  async #token(session: Session, key: string, id: string): Promise<bigint> {
    await session.query(
      `insert into rigging_locks_tokens (lock_id, lock_key, token, holder, since) values (?, ?, 1, ?, ?)
       on duplicate key update token = token + 1, holder = values(holder), since = values(since)`,
      [id, key, holderJson(), Date.now()],
    );
    const t = await session.query<{ token: string | number }>(
      'select token from rigging_locks_tokens where lock_id = ?',
      [id],
    );
    return BigInt(String(t.rows[0]?.token));
  }

  #granted(session: Session, lost: AbortController, token: bigint, name: string): Granted {
    this.held(1);
    let released = false;
    return {
      token,
      lost: lost.signal,
      release: async () => {
        if (released) return;
        released = true;
        this.held(-1);
        if (lost.signal.aborted) return;
        await session.query('select release_lock(?)', [name]);
      },
    };
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const { session } = await this.session();
    const slots = this.#slots(id);
    const r = await session.query<Record<string, number | string | null>>(
      `select is_used_lock(?) as g, ${slots.map((_, i) => `is_used_lock(?) as s${i}`).join(', ')}`,
      [this.#gate(id), ...slots],
    );
    const row = r.rows[0] ?? {};
    const readers = slots.map((_, i) => row[`s${i}`]).filter((c) => c !== null && c !== undefined);
    if (readers.length === 0 && (row.g === null || row.g === undefined)) return undefined;
    const t = await session.query<{ holder: string | null; since: string | number | null }>(
      'select holder, since from rigging_locks_tokens where lock_id = ?',
      [id],
    );
    const info = t.rows[0];
    return {
      mode: readers.length > 0 ? 'shared' : 'exclusive',
      since: info?.since ? Number(info.since) : 0,
      ...parseHolder(info?.holder),
      owner: `connection ${String(readers.length > 0 ? readers[0] : row.g)}`,
      ...(readers.length > 0 ? { count: readers.length } : {}),
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Lease table (SQLite)

class LeaseTableBackend implements Backend {
  #database: Database;
  #ttl: number;
  #leases = new Map<string, { id: string; leaseId: string; lost: AbortController }>();
  readonly #heartbeat: Heartbeat;

  constructor(database: Database, ttlMs: number, heartbeatMs: number) {
    this.#database = database;
    this.#ttl = ttlMs;
    this.#heartbeat = new Heartbeat(
      heartbeatMs,
      () => this.#leases.size > 0,
      () => this.#renew(),
    );
  }

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  async tryGrant(key: string, id: string, mode: LockMode): Promise<Granted | undefined> {
    const leaseId = randomUUID();
    const token = await this.#database.transaction(async (trx) => {
      const now = Date.now();
      await sql`delete from rigging_locks_leases where lock_id = ${id} and expires_at < ${now}`.execute(
        trx,
      );
      const rows = (
        await sql<{
          mode: string;
        }>`select mode from rigging_locks_leases where lock_id = ${id}`.execute(trx)
      ).rows;
      if (mode === 'exclusive' ? rows.length > 0 : rows.some((r) => r.mode === 'exclusive'))
        return undefined;
      const t = await sql<{ token: number | string | bigint }>`
        insert into rigging_locks_tokens (lock_id, lock_key, token, holder, since)
        values (${id}, ${key}, 1, ${holderJson()}, ${now})
        on conflict (lock_id) do update set token = rigging_locks_tokens.token + 1,
          holder = excluded.holder, since = excluded.since
        returning token`.execute(trx);
      const token = BigInt(String(t.rows[0]?.token));
      await sql`insert into rigging_locks_leases (lock_id, lease_id, lock_key, mode, token, expires_at, pid, host, since)
        values (${id}, ${leaseId}, ${key}, ${mode}, ${token.toString()}, ${now + this.#ttl}, ${process.pid}, ${HOST}, ${now})`.execute(
        trx,
      );
      return token;
    });
    if (token === undefined) return undefined;
    const lost = new AbortController();
    this.#leases.set(leaseId, { id, leaseId, lost });
    this.#heartbeat.start();
    let released = false;
    return {
      token,
      lost: lost.signal,
      release: async () => {
        if (released) return;
        released = true;
        this.#leases.delete(leaseId);
        this.#heartbeat.start();
        if (lost.signal.aborted) return;
        await sql`delete from rigging_locks_leases where lock_id = ${id} and lease_id = ${leaseId}`.execute(
          this.#database.db,
        );
      },
    };
  }

  async #renew(): Promise<void> {
    for (const lease of [...this.#leases.values()]) {
      if (lease.lost.signal.aborted) continue;
      try {
        const now = Date.now();
        const r = await sql`update rigging_locks_leases set expires_at = ${now + this.#ttl}
          where lock_id = ${lease.id} and lease_id = ${lease.leaseId} and expires_at >= ${now}`.execute(
          this.#database.db,
        );
        if (Number(r.numAffectedRows ?? 0n) === 0)
          lease.lost.abort(new Error('lease expired before renewal'));
      } catch (error) {
        lease.lost.abort(error);
      }
    }
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const rows = (
      await sql<{
        mode: string;
        pid: number | null;
        host: string | null;
        since: number;
        lease_id: string;
      }>`
        select mode, pid, host, since, lease_id from rigging_locks_leases
        where lock_id = ${id} and expires_at >= ${Date.now()} order by since`.execute(
        this.#database.db,
      )
    ).rows;
    const first = rows[0];
    if (!first) return undefined;
    return {
      mode: first.mode === 'shared' ? 'shared' : 'exclusive',
      since: Number(first.since),
      ...(first.pid !== null ? { pid: Number(first.pid) } : {}),
      ...(first.host !== null ? { host: first.host } : {}),
      owner: first.lease_id,
      count: rows.length,
    };
  }

  async close(): Promise<void> {
    this.#heartbeat.stop();
    // leases stop being renewed: free their rows now rather than at expiry, and say so
    const leases = [...this.#leases.values()];
    this.#leases.clear();
    for (const lease of leases) {
      await sql`delete from rigging_locks_leases where lock_id = ${lease.id} and lease_id = ${lease.leaseId}`
        .execute(this.#database.db)
        .catch(() => undefined);
      lease.lost.abort(new Error('lock provider closed'));
    }
  }
}

// ---------------------------------------------------------------------------------------------

/**
 * A {@link LockProvider} over a `Database` from `@rigging/sql` (see {@link sqlLockProvider}).
 * Waiters of one process queue in memory per key; only the front one talks to the database.
 */
export class SqlLockProvider extends RemoteLockProvider {
  readonly dialect: Database['dialect'];
  protected readonly lostReason: string;
  #database: Database;
  #ready: Promise<unknown> | undefined;

  constructor(database: Database, options: SqlLockOptions = {}) {
    if (!database || typeof database.session !== 'function') {
      throw new TypeError(
        `sqlLockProvider needs a Database from @rigging/sql, got ${describe(database)}`,
      );
    }
    const ttl = num(OWNER, 'ttlMs', options.ttlMs, 10_000, 1);
    const heartbeat = num(
      OWNER,
      'heartbeatMs',
      options.heartbeatMs,
      Math.max(1, Math.floor(ttl / 3)),
      1,
    );
    super(
      OWNER,
      database.dialect === 'postgres'
        ? new PostgresBackend(database, heartbeat)
        : database.dialect === 'mysql'
          ? new MysqlBackend(database, heartbeat)
          : new LeaseTableBackend(database, ttl, heartbeat),
      options,
      `sql:${database.dialect}`,
    );
    this.#database = database;
    this.dialect = database.dialect;
    this.lostReason =
      database.dialect === 'sqlite' ? 'lease could not be renewed' : 'database session lost';
  }

  /** Creates the `rigging_locks_*` tables (done on first use too). */
  migrate(): Promise<unknown> {
    this.#ready ??= this.#database.migrate('locks', lockMigrations).catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready;
  }

  protected ready(): Promise<unknown> {
    return this.migrate();
  }

  protected isTransient(error: unknown): boolean {
    return isConnectionError(error) || isRetryableError(error, this.dialect);
  }
}

/**
 * Locks over a `Database` from `@rigging/sql`:
 * - PostgreSQL: session advisory locks on one dedicated session per provider; waiters woken by
 *   `LISTEN/NOTIFY` (plus a slow fallback retry for holders that die); `lost` when the session dies.
 * - MySQL/MariaDB: `GET_LOCK` on a dedicated session, shared mode built from a gate and reader
 *   slots (a waiting writer holds new readers back); waiters poll with bounded backoff.
 * - SQLite: a lease table with TTL and heartbeat; works across processes on one machine.
 * Every grant takes a fencing token from `rigging_locks_tokens`, strictly increasing per key.
 */
export function sqlLockProvider(database: Database, options: SqlLockOptions = {}): SqlLockProvider {
  return new SqlLockProvider(database, options);
}
