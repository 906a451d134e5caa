// PostgreSQL: session advisory locks, tokens from a sequence, waiters woken by NOTIFY.
import type { Clock, LockHolder, LockMode } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { after, type Cancel } from './timers.js';
import { granted, holderJson, parseHolder, type Backend, type Granted } from './remote.js';
import { DedicatedSession, split64 } from './sql-session.js';

const CHANNEL = 'rigging_locks';

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

/** @internal PostgreSQL session advisory locks, tokens from a sequence, waiters woken by `NOTIFY`. */
export class PostgresBackend implements Backend {
  readonly #clock: Clock;
  /** The session every lock of this backend is held on. */
  readonly #session: DedicatedSession;

  constructor(database: Database, heartbeatMs: number, clock: Clock) {
    this.#clock = clock;
    this.#session = new DedicatedSession(database, heartbeatMs, clock, {
      opened: (session) => this.#opened(session),
      lost: () => this.#lost(),
    });
  }

  close(): Promise<void> {
    return this.#session.close();
  }
  #wakers = new Map<string, Set<() => void>>();
  /** Grants younger than PG_RECORD_AFTER_MS, checked by one timer (no timer per grant). */
  #young = new Set<PgGrant>();
  #recordTimer: Cancel | undefined;

  #armRecord(ms: number): void {
    this.#recordTimer = after(this.#clock, ms, () => this.#recordOld(), true);
  }

  /** Leases held PG_RECORD_AFTER_MS record their `since` for holder(); brief ones never write. */
  #recordOld(): void {
    this.#recordTimer = undefined;
    const now = this.#clock.now();
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

  async #opened(session: Session): Promise<void> {
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
      [holderJson(), this.#clock.now()],
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

  #lost(): void {
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
    const { session, lost } = this.#session.current ?? (await this.#session.open());
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
    const { session, lost } = this.#session.current ?? (await this.#session.open());
    const { big, hi, lo } = split64(id);
    const shared = mode === 'shared';
    // One round trip, no write: the prepared statement takes the lock and, once granted, the next
    // value of the token sequence (global, so strictly increasing per key)
    const r = await session.query<{ token: string | null }>(
      `execute rigging_locks_grant_${shared ? 's' : 'x'}(${big})`,
    );
    const token = r.rows[0]?.token;
    if (token === null || token === undefined) return undefined;
    const since = this.#clock.now();
    this.#session.held(1);
    const unlock = shared ? 'pg_advisory_unlock_shared' : 'pg_advisory_unlock';
    const releaseStatement = `execute rigging_locks_release_${shared ? 's' : 'x'}(${big}, ${hi | 0}, ${lo | 0})`;
    const grant: PgGrant = { session, big, token, since, recorded: undefined };
    this.#young.add(grant);
    if (this.#recordTimer === undefined) this.#armRecord(PG_RECORD_AFTER_MS);
    return granted(
      BigInt(token),
      lost,
      () => {
        this.#young.delete(grant);
        this.#session.held(-1);
      },
      async () => {
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
    );
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const { session } = await this.#session.open();
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
      since: first.since !== null ? Number(first.since) : this.#clock.now(),
      ...parseHolder(first.holder),
      owner: `backend ${first.pid}`,
      count: rows.length,
    };
  }
}
