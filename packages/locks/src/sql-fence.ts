// The resource side of fencing, in SQL: a fenced write commits only with a token not lower than
// the highest one seen for its resource, checked in the caller's transaction.
import type { Database, Kysely } from '@rigging/sql';
import { showValue } from '@rigging/core';
import { sql } from './sql-peer.js';
import { LocksError } from './errors.js';
import { lockId } from './remote.js';
import { lockMigrations } from './sql-migrations.js';

const OWNER = 'SqlFencingGuard';
const MAX_TOKEN = (1n << 63n) - 1n;

/**
 * {@link FencingGuard} over a database: the highest fencing token seen per resource is kept in
 * `rigging_locks_fences`, and {@link SqlFencingGuard.check} runs inside the caller's transaction,
 * so the write it guards commits only when its token is not lower than any token already
 * accepted for that resource (see {@link sqlFencingGuard}).
 */
export class SqlFencingGuard {
  #database: Database;
  #ready: Promise<unknown> | undefined;
  #migrated = false;

  constructor(database: Database) {
    if (!database || typeof database.migrate !== 'function' || !database.db) {
      throw new TypeError(
        `sqlFencingGuard needs a Database from @rigging/sql, got ${showValue(database)}`,
      );
    }
    this.#database = database;
  }

  /**
   * Creates the `rigging_locks_*` tables (the same migrations as `SqlLockProvider.migrate()`).
   * Call it once before the first {@link SqlFencingGuard.check}: a migration cannot run inside
   * the caller's transaction.
   */
  migrate(): Promise<unknown> {
    this.#ready ??= this.#database.migrate('locks', lockMigrations).then(
      (result) => {
        this.#migrated = true;
        return result;
      },
      (error: unknown) => {
        this.#ready = undefined;
        throw error;
      },
    );
    return this.#ready;
  }

  /**
   * Accepts `token` for `resource` inside `trx` (a transaction of `database.transaction()`), or
   * throws `locks.stale` when a higher token was already accepted for it. The token becomes the
   * resource's highest when `trx` commits; the caller's writes after this call commit with it
   * or not at all. Concurrent checks of one resource queue on its row (PostgreSQL, MySQL) or on
   * the database's write lock (SQLite).
   *
   * Throw out of the transaction on `locks.stale` (or let it propagate): nothing it wrote
   * commits.
   * @param trx - the caller's transaction (any `Kysely` of this database works, but only a
   *   transaction ties the check to the write)
   * @param resource - what the write changes, a non-empty string (a row id, a path, …)
   * @param token - the lease's fencing token (`lease.token`, or `fencingTokenFromJson(json)`)
   */
  async check(trx: Kysely<any>, resource: string, token: bigint): Promise<void> {
    if (typeof resource !== 'string' || resource.length === 0) {
      throw new TypeError(
        `${OWNER}.check: resource must be a non-empty string, got ${showValue(resource)}`,
      );
    }
    if (typeof token !== 'bigint' || token < 0n || token > MAX_TOKEN) {
      throw new TypeError(
        `${OWNER}.check: token must be a bigint between 0 and 2^63 - 1, got ${showValue(token)}`,
      );
    }
    if (!this.#migrated) {
      throw new TypeError(
        `${OWNER}.check: call \`await guard.migrate()\` once before the first check`,
      );
    }
    const id = lockId(resource);
    const value = token.toString();
    // the row exists from the first check on; inserting it with this token lets the update
    // below accept it like any other
    if (this.#database.dialect === 'mysql') {
      await sql`insert into rigging_locks_fences (resource_id, resource, token, accepted)
        values (${id}, ${resource}, ${value}, 0)
        on duplicate key update resource_id = resource_id`.execute(trx);
    } else {
      await sql`insert into rigging_locks_fences (resource_id, resource, token, accepted)
        values (${id}, ${resource}, ${value}, 0)
        on conflict (resource_id) do nothing`.execute(trx);
    }
    // `accepted` changes on every accepted check, so the row counts as updated on every dialect
    // (MySQL reports unchanged rows as unaffected)
    const updated = await sql`update rigging_locks_fences
      set token = ${value}, accepted = accepted + 1
      where resource_id = ${id} and token <= ${value}`.execute(trx);
    if (Number(updated.numAffectedRows ?? 0n) > 0) return;
    const highest = await this.highest(trx, resource);
    throw new LocksError(
      'locks.stale',
      `stale fencing token ${token} for ${JSON.stringify(resource)}: ${highest ?? 'a higher one'} was already accepted`,
      {
        details: {
          resource,
          token: value,
          ...(highest === undefined ? {} : { highest: highest.toString() }),
        },
      },
    );
  }

  /** The highest token accepted for `resource` (read through `db`: the pool, or a transaction). */
  async highest(db: Kysely<any>, resource: string): Promise<bigint | undefined> {
    const rows = (
      await sql<{ token: number | string | bigint }>`select token from rigging_locks_fences
        where resource_id = ${lockId(resource)}`.execute(db)
    ).rows;
    return rows[0] === undefined ? undefined : BigInt(String(rows[0].token));
  }
}

/**
 * A {@link SqlFencingGuard} over `database`: call `await guard.migrate()` once, then
 * `await guard.check(trx, resource, lease.token)` inside each transaction that writes `resource`.
 */
export function sqlFencingGuard(database: Database): SqlFencingGuard {
  return new SqlFencingGuard(database);
}
