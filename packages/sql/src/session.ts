import { Kysely, MysqlDialect, PostgresDialect, SqliteDialect } from 'kysely';
import type { SqliteHandle } from './sqlite-handle.js';
import type { Dialect } from './dialect.js';

/** A PostgreSQL notification received by a session that ran `LISTEN`. */
export interface Notification {
  /** The channel notified. */
  channel: string;
  /** The payload given to `NOTIFY`, if any. */
  payload: string | undefined;
}

/**
 * A dedicated database connection (outside the pool). Session-scoped state — PostgreSQL
 * advisory locks and `LISTEN`, MySQL `GET_LOCK` — lives exactly as long as it does.
 */
export interface Session extends AsyncDisposable {
  /** The dialect of the database the session is connected to. */
  readonly dialect: Dialect;
  /** A Kysely bound to this one connection. Run one statement or transaction at a time. */
  readonly db: Kysely<any>;
  /** Server-side connection id (`pg_backend_pid()`, MySQL `CONNECTION_ID()`); undefined for SQLite. */
  readonly id: number | undefined;
  /** Aborts when the connection is lost (killed, server gone, network error). */
  readonly lost: AbortSignal;
  /** Resolves once the session is closed or lost. */
  readonly closed: Promise<void>;
  /**
   * Runs one SQL statement with positional parameters (`$1` on PostgreSQL, `?` elsewhere).
   * Returns the rows (empty for statements without a result set) and the affected row count.
   */
  query<R = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
  ): Promise<QueryResult<R>>;
  /** PostgreSQL: notifications for channels this session listens to. */
  onNotification(listener: (n: Notification) => void): () => void;
  /** Closes the connection. Idempotent. */
  close(): Promise<void>;
}

/** The result of {@link Session.query}. */
export interface QueryResult<R> {
  /** The rows returned, in order; empty for statements without a result set. */
  rows: R[];
  /** Rows inserted, updated or deleted by the statement (0 when the driver does not say). */
  affectedRows: number;
}

export interface SessionFactory {
  dialect: Dialect;
  open(): Promise<Session>;
}

interface PgClient {
  connect(): Promise<void>;
  query(
    text: string,
    params?: readonly unknown[],
  ): Promise<{ rows: unknown[]; rowCount: number | null }>;
  on(event: 'notification', fn: (n: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', fn: (err?: Error) => void): void;
  end(): Promise<void>;
  release?: () => void;
}

interface MysqlConnection {
  threadId: number | null;
  query(
    sql: string,
    params: readonly unknown[],
    cb: (err: Error | null, rows: unknown) => void,
  ): void;
  on(event: 'error' | 'end', fn: (err?: Error) => void): void;
  end(cb: (err?: Error | null) => void): void;
  destroy(): void;
  connect(cb: (err: Error | null) => void): void;
  release?: () => void;
}

interface SqliteStatementHandle extends SqliteHandle {
  prepare(text: string): {
    reader: boolean;
    all(...params: unknown[]): unknown[];
    run(...params: unknown[]): { changes: number };
  };
}

function makeLifecycle() {
  const controller = new AbortController();
  let resolveClosed!: () => void;
  const closed = new Promise<void>((resolve) => {
    resolveClosed = resolve;
  });
  return {
    lost: controller.signal,
    closed,
    markLost(reason: unknown) {
      if (!controller.signal.aborted) controller.abort(reason);
      resolveClosed();
    },
    markClosed() {
      resolveClosed();
    },
  };
}

export const openSession = {
  async postgres(
    Client: new (config: Record<string, unknown>) => unknown,
    url: string,
    connectTimeoutMs: number,
  ): Promise<Session> {
    const client = new Client({
      connectionString: url,
      connectionTimeoutMillis: connectTimeoutMs,
      // TCP keepalive, so a silently dropped network path eventually aborts `lost` too.
      keepAlive: true,
    }) as PgClient;
    const life = makeLifecycle();
    let closing = false;
    const listeners = new Set<(n: Notification) => void>();
    client.on('error', (err) => life.markLost(err ?? new Error('PostgreSQL session error')));
    client.on('end', () => {
      if (!closing) life.markLost(new Error('PostgreSQL session ended'));
      else life.markClosed();
    });
    client.on('notification', (n) => {
      for (const l of [...listeners]) l({ channel: n.channel, payload: n.payload });
    });
    await client.connect();
    const pidRow = await client.query('select pg_backend_pid() as pid');
    const id = Number((pidRow.rows[0] as { pid: number }).pid);
    client.release = () => {};
    const db = new Kysely<any>({
      dialect: new PostgresDialect({
        pool: { connect: async () => client, end: async () => {} } as never,
      }),
    });
    let closePromise: Promise<void> | undefined;
    let tail: Promise<unknown> = Promise.resolve();
    const session: Session = {
      dialect: 'postgres',
      db,
      id,
      lost: life.lost,
      closed: life.closed,
      async query<R>(text: string, params: readonly unknown[] = []) {
        // One query at a time on the connection, in call order: pg 8 queues overlapping calls
        // itself but deprecates it (pg 9 will refuse), and callers such as lock providers do
        // overlap them (a release while a renewal is in flight).
        const run = tail.then(() => client.query(text, params));
        tail = run.catch(() => {});
        const r = await run;
        return { rows: r.rows as R[], affectedRows: r.rowCount ?? 0 };
      },
      onNotification(listener) {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
      close() {
        closePromise ??= (async () => {
          closing = true;
          listeners.clear();
          await client.end().catch(() => {});
          life.markClosed();
        })();
        return closePromise;
      },
      [Symbol.asyncDispose]: () => session.close(),
    };
    return session;
  },

  async mysql(
    createConnection: (config: Record<string, unknown>) => unknown,
    config: Record<string, unknown>,
  ): Promise<Session> {
    const conn = createConnection(config) as MysqlConnection;
    const life = makeLifecycle();
    let closing = false;
    conn.on('error', (err) => life.markLost(err ?? new Error('MySQL session error')));
    conn.on('end', () => {
      if (!closing) life.markLost(new Error('MySQL session ended'));
      else life.markClosed();
    });
    await new Promise<void>((resolve, reject) =>
      conn.connect((err) => (err ? reject(err) : resolve())),
    );
    conn.release = () => {};
    const db = new Kysely<any>({
      dialect: new MysqlDialect({
        pool: {
          getConnection: (cb: (err: Error | null, c: MysqlConnection) => void) => cb(null, conn),
          end: (cb: (err?: Error | null) => void) => cb(null),
        } as never,
      }),
    });
    const run = (text: string, params: readonly unknown[]) =>
      new Promise<unknown>((resolve, reject) =>
        conn.query(text, params, (err, rows) => (err ? reject(err) : resolve(rows))),
      );
    let closePromise: Promise<void> | undefined;
    const session: Session = {
      dialect: 'mysql',
      db,
      id: conn.threadId ?? undefined,
      lost: life.lost,
      closed: life.closed,
      async query<R>(text: string, params: readonly unknown[] = []) {
        const r = await run(text, params);
        if (Array.isArray(r)) return { rows: r as R[], affectedRows: r.length };
        return { rows: [], affectedRows: (r as { affectedRows?: number }).affectedRows ?? 0 };
      },
      onNotification() {
        return () => {};
      },
      close() {
        closePromise ??= (async () => {
          closing = true;
          await new Promise<void>((resolve) => conn.end(() => resolve()));
          life.markClosed();
        })();
        return closePromise;
      },
      [Symbol.asyncDispose]: () => session.close(),
    };
    return session;
  },

  async sqlite(handle: SqliteHandle, owned: boolean): Promise<Session> {
    const h = handle as SqliteStatementHandle;
    const life = makeLifecycle();
    const db = new Kysely<any>({ dialect: new SqliteDialect({ database: h as never }) });
    let closePromise: Promise<void> | undefined;
    const session: Session = {
      dialect: 'sqlite',
      db,
      id: undefined,
      lost: life.lost,
      closed: life.closed,
      async query<R>(text: string, params: readonly unknown[] = []) {
        const stmt = h.prepare(text);
        if (stmt.reader) {
          const rows = stmt.all(...params) as R[];
          return { rows, affectedRows: rows.length };
        }
        return { rows: [], affectedRows: stmt.run(...params).changes };
      },
      onNotification() {
        return () => {};
      },
      close() {
        closePromise ??= (async () => {
          if (owned && h.open) h.close();
          life.markClosed();
        })();
        return closePromise;
      },
      [Symbol.asyncDispose]: () => session.close(),
    };
    return session;
  },
};
