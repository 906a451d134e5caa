import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  nonNegativeIntegerOption,
  positiveIntegerOption,
  silentLogger,
  sleep,
  type Logger,
} from '@rigging/core';
import {
  Kysely,
  MysqlDialect,
  PostgresDialect,
  SqliteDialect,
  sql,
  type Dialect as KyselyDialect,
  type IsolationLevel,
} from 'kysely';
import { loadDriver } from './drivers.js';
import { SqlError } from './errors.js';
import { runMigrations, type Migration, type MigrateResult } from './migrate.js';
import { isConnectionError, isRetryableError } from './retry.js';
import { openSession, type Session, type SessionFactory } from './session.js';
import { parseDatabaseUrl, redactUrl, type Dialect } from './url.js';

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
}

/** Options of {@link Database.transaction}. */
export interface TransactionOptions {
  /** Isolation level (PostgreSQL, MySQL; SQLite transactions are always serializable). */
  isolation?: IsolationLevel;
  /**
   * How many times a serialization failure, deadlock or busy database is retried (the whole
   * callback runs again, so keep it free of outside side effects). @default 5
   */
  retries?: number;
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
  transaction<T>(fn: (trx: Kysely<DB>) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * A dedicated connection outside the pool, for session-scoped features: advisory locks,
   * `LISTEN`, `GET_LOCK`. Its `lost` signal aborts when the connection dies.
   */
  session(): Promise<Session>;
  /** Closes the pool and every open session. Idempotent. */
  close(): Promise<void>;
}

interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool;
  Client: new (config: Record<string, unknown>) => unknown;
}
interface PgPool {
  on(event: 'error', fn: (err: Error) => void): void;
  connect(): Promise<{ on(event: 'error', fn: (err: Error) => void): void }>;
  query(text: string): Promise<unknown>;
  end(): Promise<void>;
}
interface MysqlModule {
  createPool(config: Record<string, unknown>): MysqlPool;
  createConnection(config: Record<string, unknown>): unknown;
}
interface MysqlPool {
  on(event: string, fn: (...args: unknown[]) => void): void;
  query(sql: string, cb: (err: Error | null) => void): void;
  end(cb: (err?: Error | null) => void): void;
}
type SqliteCtor = new (filename: string, options?: Record<string, unknown>) => SqliteHandle;
export interface SqliteHandle {
  pragma(source: string, options?: { simple?: boolean }): unknown;
  prepare(source: string): SqliteStatement;
  close(): void;
  readonly open: boolean;
}
interface SqliteStatement {
  readonly reader: boolean;
  /** True while an iterator over the statement is open (better-sqlite3). */
  readonly busy?: boolean;
}

/**
 * The handle Kysely's SQLite driver sees: `prepare(sql)` returns a cached statement for SQL text
 * it has seen (bounded, least recently used evicted). A statement still being iterated (a
 * streaming query) is never handed out twice: a fresh one is prepared instead. better-sqlite3
 * re-prepares a statement by itself after a schema change.
 */
export function cachingSqliteHandle(handle: SqliteHandle, size: number): SqliteHandle {
  if (size <= 0) return handle;
  const cache = new Map<string, SqliteStatement>();
  return {
    pragma: (source, options) => handle.pragma(source, options),
    prepare(source) {
      const hit = cache.get(source);
      if (hit && !hit.busy) {
        // Refresh its place in the LRU order.
        cache.delete(source);
        cache.set(source, hit);
        return hit;
      }
      const stmt = handle.prepare(source);
      if (!hit) {
        cache.set(source, stmt);
        if (cache.size > size) cache.delete(cache.keys().next().value!);
      }
      return stmt;
    },
    close() {
      cache.clear();
      handle.close();
    },
    get open() {
      return handle.open;
    },
  };
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
  const logger = options.logger ?? silentLogger;
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
  const synchronous = options.synchronous ?? 'normal';
  if (!['off', 'normal', 'full', 'extra'].includes(synchronous)) {
    throw new TypeError(
      `openDatabase: synchronous must be off, normal, full or extra, got ${String(synchronous)}`,
    );
  }
  const shownUrl =
    parsed.dialect === 'sqlite' ? `sqlite:${parsed.filename}` : redactUrl(parsed.url);

  let dialect: KyselyDialect;
  let closeDriver: () => Promise<void>;
  let sessionFactory: SessionFactory;

  if (parsed.dialect === 'sqlite') {
    const Sqlite = await loadDriver<SqliteCtor>('sqlite', options.driver);
    const openHandle = (): SqliteHandle => {
      let handle: SqliteHandle | undefined;
      try {
        if (!parsed.memory) mkdirSync(dirname(parsed.filename), { recursive: true });
        handle = new Sqlite(parsed.filename);
        handle.pragma(`busy_timeout = ${busyTimeoutMs}`);
        if (!parsed.memory) handle.pragma('journal_mode = WAL');
        handle.pragma(`synchronous = ${synchronous}`);
        handle.pragma('foreign_keys = ON');
        return handle;
      } catch (cause) {
        try {
          if (handle?.open) handle.close();
        } catch {
          // already failing; the open error is the one to report
        }
        const message = (cause as Error)?.message ?? String(cause);
        // better-sqlite3 loads its native addon on first use, not on import.
        if (
          /bindings file|NODE_MODULE_VERSION|was compiled against|invalid ELF|wrong ELF/i.test(
            message,
          )
        ) {
          throw new SqlError(
            'sql.driver_missing',
            `the SQLite driver 'better-sqlite3' is installed but its native module failed to load: ${message}; run \`npm rebuild better-sqlite3\` (pnpm: allow its build script)`,
            { cause, details: { package: 'better-sqlite3' } },
          );
        }
        throw new SqlError(
          'sql.cannot_open',
          `cannot open SQLite database ${shownUrl}: ${message}; check the path exists, is writable and is a SQLite database`,
          { cause, details: { url: shownUrl } },
        );
      }
    };
    const handle = openHandle();
    dialect = new SqliteDialect({
      database: cachingSqliteHandle(handle, statementCacheSize) as never,
    });
    closeDriver = async () => {
      if (handle.open) handle.close();
    };
    sessionFactory = {
      dialect: 'sqlite',
      open: async () => openSession.sqlite(parsed.memory ? handle : openHandle(), !parsed.memory),
    };
  } else if (parsed.dialect === 'postgres') {
    const pg = await loadDriver<PgModule>('postgres', options.driver);
    const pool = new pg.Pool({
      connectionString: parsed.url,
      max: poolSize,
      connectionTimeoutMillis: connectTimeoutMs,
    });
    // An idle pooled client whose server connection dies emits 'error' on the pool; without a
    // listener that would crash the process. The pool discards the client by itself.
    pool.on('error', (err) => logger.warn({ err }, 'idle PostgreSQL connection lost'));
    try {
      await pool.query('select 1');
    } catch (cause) {
      await pool.end().catch(() => {});
      throw unreachable('PostgreSQL', shownUrl, cause);
    }
    // A checked-out client whose connection dies (backend terminated, server restarted) emits
    // 'error' on itself, not on the pool; with no listener that kills the process. Give every
    // client a listener once; pg-pool then discards the broken client when it is released.
    const guarded = new WeakSet<object>();
    const guardedPool = {
      async connect() {
        const client = await pool.connect();
        if (!guarded.has(client)) {
          guarded.add(client);
          client.on('error', (err) =>
            logger.warn({ err }, 'PostgreSQL connection lost while in use'),
          );
        }
        return client;
      },
      end: () => pool.end(),
    };
    dialect = new PostgresDialect({ pool: guardedPool as never });
    closeDriver = () => pool.end();
    sessionFactory = {
      dialect: 'postgres',
      open: () => openSession.postgres(pg.Client, parsed.url, connectTimeoutMs),
    };
  } else {
    const mysql = await loadDriver<MysqlModule>('mysql', options.driver);
    const config = {
      uri: parsed.url,
      connectTimeout: connectTimeoutMs,
      supportBigNumbers: true,
      bigNumberStrings: true,
      timezone: 'Z',
    };
    const pool = mysql.createPool({ ...config, connectionLimit: poolSize });
    pool.on('error', (err) => logger.warn({ err }, 'MySQL pool error'));
    try {
      await new Promise<void>((resolve, reject) =>
        pool.query('select 1', (err) => (err ? reject(err) : resolve())),
      );
    } catch (cause) {
      await new Promise<void>((resolve) => pool.end(() => resolve()));
      throw unreachable('MySQL', shownUrl, cause);
    }
    dialect = new MysqlDialect({ pool: pool as never });
    closeDriver = () =>
      new Promise<void>((resolve, reject) => pool.end((err) => (err ? reject(err) : resolve())));
    sessionFactory = {
      dialect: 'mysql',
      open: () => openSession.mysql(mysql.createConnection, config),
    };
  }

  const db = new Kysely<DB>({ dialect });
  const sessions = new Set<Session>();
  let closed: Promise<void> | undefined;
  const assertOpen = () => {
    if (closed) {
      throw new SqlError('sql.closed', `database ${shownUrl} is closed; open it again to use it`);
    }
  };

  const database: Database<DB> = {
    dialect: parsed.dialect,
    db,
    url: shownUrl,
    async migrate(namespace, migrations) {
      assertOpen();
      return runMigrations(database, namespace, migrations);
    },
    async transaction<T>(fn: (trx: Kysely<DB>) => Promise<T>, txOptions: TransactionOptions = {}) {
      const retries = nonNegativeIntegerOption('transaction', 'retries', txOptions.retries, 5);
      assertOpen();
      for (let attempt = 0; ; attempt++) {
        try {
          if (parsed.dialect === 'sqlite') {
            return parsed.memory
              ? await sqliteTransaction(db, fn)
              : await withFileQueue(parsed.filename, () => sqliteTransaction(db, fn));
          }
          let builder = db.transaction();
          if (txOptions.isolation) builder = builder.setIsolationLevel(txOptions.isolation);
          return await builder.execute(fn);
        } catch (error) {
          if (!isRetryableError(error, parsed.dialect)) throw error;
          if (attempt >= retries) {
            throw new SqlError(
              'sql.transaction_failed',
              `transaction still conflicting after ${retries + 1} attempt${retries === 0 ? '' : 's'}: ${(error as Error).message}; retry later, raise \`retries\` or reduce contention`,
              { cause: error },
            );
          }
          logger.debug({ attempt, err: error }, 'retrying transaction');
          await sleep(Math.min(200, 2 ** attempt * 5) * (0.5 + Math.random()));
        }
      }
    },
    async session() {
      assertOpen();
      let session: Session;
      try {
        session = await sessionFactory.open();
      } catch (cause) {
        if (SqlError.isInstance(cause)) throw cause;
        throw unreachable(sessionFactory.dialect, shownUrl, cause);
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
        await Promise.allSettled([...sessions].map((s) => s.close()));
        await db.destroy().catch(() => {});
        await closeDriver().catch(() => {});
      })();
      return closed;
    },
    [Symbol.asyncDispose]() {
      return database.close();
    },
  };
  return database;
}

function unreachable(what: string, url: string, cause: unknown): SqlError {
  const reason = (cause as Error)?.message ?? String(cause);
  const hint = isConnectionError(cause)
    ? 'is the server running and the URL right?'
    : 'check the URL, the credentials and that the database exists';
  return new SqlError(
    'sql.unreachable',
    `cannot connect to ${what} at ${url}: ${reason}; ${hint}`,
    {
      cause,
      details: { url },
    },
  );
}

const fileQueues = new Map<string, { tail: Promise<void>; users: number }>();

/**
 * Queues the SQLite transactions of every `Database` of this process on one file. better-sqlite3
 * waits for a busy lock synchronously, blocking the event loop: a second connection's BEGIN
 * IMMEDIATE would stall the whole process for `busyTimeoutMs` while the first transaction, which
 * needs the event loop to finish, cannot progress. Other processes still meet the busy timeout.
 */
async function withFileQueue<T>(file: string, fn: () => Promise<T>): Promise<T> {
  let entry = fileQueues.get(file);
  if (!entry) fileQueues.set(file, (entry = { tail: Promise.resolve(), users: 0 }));
  const previous = entry.tail;
  let release!: () => void;
  const mine = new Promise<void>((resolve) => {
    release = resolve;
  });
  entry.tail = previous.then(() => mine);
  entry.users++;
  try {
    await previous;
    return await fn();
  } finally {
    release();
    if (--entry.users === 0) fileQueues.delete(file);
  }
}

/** SQLite transactions start with BEGIN IMMEDIATE, so two writers queue on the busy timeout
 * instead of failing with SQLITE_BUSY when a read lock would need upgrading. */
async function sqliteTransaction<DB, T>(
  db: Kysely<DB>,
  fn: (trx: Kysely<DB>) => Promise<T>,
): Promise<T> {
  return db.connection().execute(async (conn) => {
    await sql`begin immediate`.execute(conn);
    let result: T;
    try {
      result = await fn(conn);
    } catch (error) {
      await sql`rollback`.execute(conn).catch(() => {});
      throw error;
    }
    try {
      await sql`commit`.execute(conn);
    } catch (error) {
      await sql`rollback`.execute(conn).catch(() => {});
      throw error;
    }
    return result;
  });
}
