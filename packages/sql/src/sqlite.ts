/**
 * SQLite through better-sqlite3: opening a file with the pragmas we rely on, the statement cache,
 * and transactions queued per file.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { SqliteDialect, sql, type Kysely } from 'kysely';
import type { ConnectSettings, Connector } from './connector.js';
import { checkSqliteDriver, loadDriver } from './drivers.js';
import { SqlError } from './errors.js';
import { openSession } from './session.js';
import { cachingSqliteHandle, type SqliteCtor, type SqliteHandle } from './sqlite-handle.js';

/** Opens `sqlite:<filename>` (or `sqlite::memory:` when `memory`). @internal */
export async function connectSqlite(
  filename: string,
  memory: boolean,
  settings: ConnectSettings,
): Promise<Connector> {
  // a driver build that crashes this Node must be refused before it is loaded
  if (settings.driver === undefined) checkSqliteDriver(process.versions.node, import.meta.url);
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

/**
 * Process-wide on purpose, and the one such state of this package: what it orders (better-sqlite3
 * blocking the event loop) is shared by every `Database` of the process, so no instance could own
 * it. Bounded by the files with a transaction in flight: an entry leaves when its last user does.
 */
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
