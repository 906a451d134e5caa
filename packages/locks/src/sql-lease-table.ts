// SQLite: a lease table with TTL and heartbeat (multi-process on one machine).
import { randomUUID } from 'node:crypto';
import type { Clock, LockHolder, LockMode } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { sql } from './sql-peer.js';
import { closedError } from './common.js';
import { HOST, RenewedLeases, granted, holderJson, type Backend, type Granted } from './remote.js';
import { OWNER } from './sql-session.js';

/** @internal SQLite leases: a row per grant with an expiry, renewed by a heartbeat. */
export class LeaseTableBackend implements Backend {
  readonly #database: Database;
  readonly #ttl: number;
  readonly #clock: Clock;
  readonly #leases: RenewedLeases<{ id: string; leaseId: string; lost: AbortController }>;

  constructor(database: Database, ttlMs: number, heartbeatMs: number, clock: Clock) {
    this.#database = database;
    this.#ttl = ttlMs;
    this.#clock = clock;
    this.#leases = new RenewedLeases(clock, heartbeatMs, () => this.#renew());
  }

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  async tryGrant(key: string, id: string, mode: LockMode): Promise<Granted | undefined> {
    if (this.#leases.closed) throw closedError(OWNER);
    const leaseId = randomUUID();
    const token = await this.#database.transaction(async (trx) => {
      const now = this.#clock.now();
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
    this.#leases.add(leaseId, { id, leaseId, lost });
    return granted(
      token,
      lost,
      () => {
        this.#leases.delete(leaseId);
      },
      () =>
        sql`delete from rigging_locks_leases where lock_id = ${id} and lease_id = ${leaseId}`.execute(
          this.#database.db,
        ),
    );
  }

  /** Extends every held lease by `ttl`, aborting the `lost` of those found gone. */
  async #renew(): Promise<void> {
    for (const lease of this.#leases.values()) {
      if (lease.lost.signal.aborted) continue;
      try {
        const now = this.#clock.now();
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
        where lock_id = ${id} and expires_at >= ${this.#clock.now()} order by since`.execute(
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
    // leases stop being renewed: free their rows now rather than at expiry, and say so
    const leases = this.#leases.close();
    for (const lease of leases) {
      await sql`delete from rigging_locks_leases where lock_id = ${lease.id} and lease_id = ${lease.leaseId}`
        .execute(this.#database.db)
        .catch(() => undefined);
      lease.lost.abort(new Error('lock provider closed'));
    }
  }
}
