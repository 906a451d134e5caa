import {
  nonNegativeIntegerOption,
  positiveIntegerOption,
  silentLogger,
  type Logger,
} from '@rigging/core';
import { Kysely } from 'kysely';
import type { ConnectSettings, Connector } from './connector.js';
import { SqlError, unreachable } from './errors.js';
import { DEFAULT_PREPARED_STATEMENTS } from './pg-statements.js';
import { runMigrations, type Migration, type MigrateResult } from './migrate.js';
import { connectMysql, connectPostgres } from './servers.js';
import type { Session } from './session.js';
import { connectSqlite } from './sqlite.js';
import { runTransaction, type TransactionOptions, type WithCommit } from './transaction.js';
import type { Dialect } from './dialect.js';
import { parseDatabaseUrl, redactUrl, type ParsedUrl } from './url.js';

/** Options of {@link openDatabase}. */
export interface OpenDatabaseOptions {
  /** Pooled connections (PostgreSQL, MySQL). @default 10 */
  poolSize?: number;
  /** How long a SQLite statement waits for another process's write lock. @default 5000 */
  busyTimeoutMs?: number;
  /**
   * SQLite `synchronous` pragma. In WAL mode `normal` survives a process crash (SIGKILL) but may
   * lose the last commits on power loss; `full` survives power loss too, slower.
   * @default 'normal'
   */
  synchronous?: 'off' | 'normal' | 'full' | 'extra';
  /** Connection timeout for PostgreSQL / MySQL. @default 10000 */
  connectTimeoutMs?: number;
  /** The driver module to use instead of importing it (`better-sqlite3`, `pg` or `mysql2`). */
  driver?: unknown;
  /** @default silentLogger */
  logger?: Logger;
  /**
   * SQLite: how many prepared statements are kept per connection, keyed by SQL text (least
   * recently used evicted). Kysely compiles every query to SQL text; preparing it again on every
   * call costs more than running a small query. `0` disables the cache. @default 500
   */
  statementCacheSize?: number;
  /**
   * PostgreSQL: how many statements each pooled connection prepares by name. A statement with
   * parameters that a connection is asked for a second time is then only bound and executed, not
   * parsed and planned again: a small statement costs the server about a third less. The first
   * statements that qualify are kept for the connection's life; later ones run unnamed. A named
   * statement that cannot run (its table changed under it, or the server connection lost it) is
   * run again unnamed when it was not in a transaction; in a transaction, the transaction fails
   * with `sql.statement_invalidated`, which {@link Database.transaction} retries. Behind a pooler
   * that moves sessions between server connections per transaction without tracking prepared
   * statements (PgBouncer's transaction mode before 1.21), the first statement lost turns naming
   * off for the pool (logged at `warn`); set `0` there to start that way. Sessions
   * ({@link Database.session}) never name statements. `0` names none. @default 100
   */
  preparedStatements?: number;
}

/** A database opened by URL: a Kysely instance plus migrations, retrying transactions and sessions. */
export interface Database<DB = any> extends AsyncDisposable {
  /** Which engine the URL named. */
  readonly dialect: Dialect;
  /** The Kysely instance over the connection pool. */
  readonly db: Kysely<DB>;
  /** The URL with its password hidden. */
  readonly url: string;
  /**
   * Applies the pending `migrations` of `namespace` (each package owns one), recording them in
   * `rigging_migrations`. Safe when several processes migrate at once.
   */
  migrate(namespace: string, migrations: readonly Migration[]): Promise<MigrateResult>;
  /** Runs `fn` in a transaction, retrying serialization failures, deadlocks and busy errors. */
  transaction<T>(
    fn: (trx: Kysely<DB>) => Promise<T | WithCommit<T>>,
    options?: TransactionOptions,
  ): Promise<T>;
  transaction<T>(fn: (trx: Kysely<DB>) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * A dedicated connection outside the pool, for session-scoped features: advisory locks,
   * `LISTEN`, `GET_LOCK`. Its `lost` signal aborts when the connection dies.
   */
  session(): Promise<Session>;
  /** Closes the pool and every open session. Idempotent. */
  close(): Promise<void>;
}

/**
 * Opens a database by URL: `sqlite:<path>` (created if missing, with its directory),
 * `sqlite::memory:`, `postgres://…` or `mysql://…`. The driver (better-sqlite3, pg or mysql2)
 * is imported only now, and a missing one is a `sql.driver_missing` error naming the package.
 * The connection is checked before this resolves (`sql.unreachable`, `sql.cannot_open`).
 */
export async function openDatabase<DB = any>(
  url: string,
  options: OpenDatabaseOptions = {},
): Promise<Database<DB>> {
  const parsed = parseDatabaseUrl(url);
  const settings = connectSettings(parsed, options);
  const connector =
    parsed.dialect === 'sqlite'
      ? await connectSqlite(parsed.filename, parsed.memory, settings)
      : parsed.dialect === 'postgres'
        ? await connectPostgres(parsed.url, settings)
        : await connectMysql(parsed.url, settings);
  return databaseOver<DB>(parsed.dialect, connector, settings);
}

/** The options, validated (a `TypeError` naming a bad one), with their defaults. */
function connectSettings(parsed: ParsedUrl, options: OpenDatabaseOptions): ConnectSettings {
  const owner = 'openDatabase';
  const poolSize = positiveIntegerOption(owner, 'poolSize', options.poolSize, 10);
  const busyTimeoutMs = nonNegativeIntegerOption(
    owner,
    'busyTimeoutMs',
    options.busyTimeoutMs,
    5000,
  );
  const connectTimeoutMs = nonNegativeIntegerOption(
    owner,
    'connectTimeoutMs',
    options.connectTimeoutMs,
    10_000,
  );
  const statementCacheSize = nonNegativeIntegerOption(
    owner,
    'statementCacheSize',
    options.statementCacheSize,
    500,
  );
  const preparedStatements = nonNegativeIntegerOption(
    owner,
    'preparedStatements',
    options.preparedStatements,
    DEFAULT_PREPARED_STATEMENTS,
  );
  const synchronous = options.synchronous ?? 'normal';
  if (!['off', 'normal', 'full', 'extra'].includes(synchronous)) {
    throw new TypeError(
      `openDatabase: synchronous must be off, normal, full or extra, got ${String(synchronous)}`,
    );
  }
  return {
    poolSize,
    busyTimeoutMs,
    connectTimeoutMs,
    statementCacheSize,
    preparedStatements,
    synchronous,
    driver: options.driver,
    logger: options.logger ?? silentLogger,
    shownUrl: parsed.dialect === 'sqlite' ? `sqlite:${parsed.filename}` : redactUrl(parsed.url),
  };
}

/** The {@link Database} over an opened driver. */
function databaseOver<DB>(
  dialect: Dialect,
  connector: Connector,
  { logger, shownUrl }: ConnectSettings,
): Database<DB> {
  const db = new Kysely<DB>({ dialect: connector.dialect });
  const sessions = new Set<Session>();
  const closing = new AbortController();
  let closed: Promise<void> | undefined;
  const assertOpen = () => {
    if (closed) {
      throw new SqlError('sql.closed', `database ${shownUrl} is closed; open it again to use it`);
    }
  };
  const scope = { db, dialect, connector, logger, closing: closing.signal, assertOpen };

  const database: Database<DB> = {
    dialect,
    db,
    url: shownUrl,
    async migrate(namespace, migrations) {
      assertOpen();
      return runMigrations(database, namespace, migrations);
    },
    // Both overloads: a `withCommit` result resolves with its value (see `runTransaction`).
    transaction: ((fn: (trx: Kysely<DB>) => Promise<unknown>, txOptions: TransactionOptions = {}) =>
      runTransaction(scope, fn, txOptions)) as Database<DB>['transaction'],
    async session() {
      assertOpen();
      let session: Session;
      try {
        session = await connector.sessions.open();
      } catch (cause) {
        if (SqlError.isInstance(cause)) throw cause;
        throw unreachable(connector.sessions.dialect, shownUrl, cause);
      }
      sessions.add(session);
      session.closed.then(
        () => sessions.delete(session),
        () => sessions.delete(session),
      );
      return session;
    },
    close() {
      closed ??= (async () => {
        closing.abort();
        await Promise.allSettled([...sessions].map((s) => s.close()));
        await db.destroy().catch(() => {});
        await connector.close().catch(() => {});
      })();
      return closed;
    },
    [Symbol.asyncDispose]() {
      return database.close();
    },
  };
  return database;
}
