/**
 * SQLite through better-sqlite3: opening a file with the pragmas we rely on, the statement cache,
 * and transactions queued per file.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { SqliteDialect, sql, type Kysely } from 'kysely';
import type { ConnectSettings, Connector } from './connector.js';
import { loadDriver } from './drivers.js';
import { SqlError } from './errors.js';
import { openSession } from './session.js';

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

/** Opens `sqlite:<filename>` (or `sqlite::memory:` when `memory`). @internal */
export async function connectSqlite(
  filename: string,
  memory: boolean,
  settings: ConnectSettings,
): Promise<Connector> {
  const Sqlite = await loadDriver<SqliteCtor>('sqlite', settings.driver);
  const openHandle = () => openSqliteHandle(Sqlite, filename, memory, settings);
  const handle = openHandle();
  return {
    dialect: new SqliteDialect({
      database: cachingSqliteHandle(handle, settings.statementCacheSize) as never,
    }),
    sessions: {
      dialect: 'sqlite',
      open: async () => openSession.sqlite(memory ? handle : openHandle(), !memory),
    },
    transaction: (db, fn) =>
      memory ? sqliteTransaction(db, fn) : withFileQueue(filename, () => sqliteTransaction(db, fn)),
    close: async () => {
      if (handle.open) handle.close();
    },
  };
}

/** A new connection to the file, in WAL mode with the busy timeout, or a `SqlError` saying why not. */
function openSqliteHandle(
  Sqlite: SqliteCtor,
  filename: string,
  memory: boolean,
  { busyTimeoutMs, synchronous, shownUrl }: ConnectSettings,
): SqliteHandle {
  let handle: SqliteHandle | undefined;
  try {
    if (!memory) mkdirSync(dirname(filename), { recursive: true });
    handle = new Sqlite(filename);
    handle.pragma(`busy_timeout = ${busyTimeoutMs}`);
    if (!memory) handle.pragma('journal_mode = WAL');
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
      /bindings file|NODE_MODULE_VERSION|was compiled against|invalid ELF|wrong ELF/i.test(message)
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
