import { positiveOption, showValue } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { isConnectionError, isRetryableError } from './sql-peer.js';
import { validateClock, type ProviderBaseOptions } from './common.js';
import { LocksError } from './errors.js';
import { RemoteLockProvider } from './remote.js';
import { lockMigrations } from './sql-migrations.js';
import { OWNER } from './sql-session.js';
import { PostgresBackend } from './sql-postgres.js';
import { MysqlBackend } from './sql-mysql.js';
import { LeaseTableBackend } from './sql-lease-table.js';

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

export { lockMigrations } from './sql-migrations.js';
export { SqlFencingGuard, sqlFencingGuard } from './sql-fence.js';

/**
 * A {@link @rigging/core!LockProvider} over a `Database` from `@rigging/sql` (see {@link sqlLockProvider}).
 * Waiters of one process queue in memory per key; only the front one talks to the database.
 */
export class SqlLockProvider extends RemoteLockProvider {
  /** The database's dialect, which picked the backend: session advisory locks on PostgreSQL, named locks (`GET_LOCK`) on MySQL, a lease table on SQLite. */
  readonly dialect: Database['dialect'];
  protected readonly lostReason: string;
  #database: Database;
  #ready: Promise<unknown> | undefined;

  constructor(database: Database, options: SqlLockOptions = {}) {
    if (!database || typeof database.session !== 'function') {
      throw new TypeError(
        `sqlLockProvider needs a Database from @rigging/sql, got ${showValue(database)}`,
      );
    }
    const ttl = positiveOption(OWNER, 'ttlMs', options.ttlMs, 10_000);
    const heartbeat = positiveOption(
      OWNER,
      'heartbeatMs',
      options.heartbeatMs,
      Math.max(1, Math.floor(ttl / 3)),
    );
    const clock = validateClock(OWNER, options.clock);
    super(
      OWNER,
      database.dialect === 'postgres'
        ? new PostgresBackend(database, heartbeat, clock)
        : database.dialect === 'mysql'
          ? new MysqlBackend(database, heartbeat, clock)
          : new LeaseTableBackend(database, ttl, heartbeat, clock),
      options,
      `sql:${database.dialect}`,
      clock,
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
    if (LocksError.isInstance(error)) return false; // closed
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
