/** PostgreSQL (pg) and MySQL/MariaDB (mysql2): a pool checked with `select 1` before use. */
import { MysqlDialect, PostgresDialect } from 'kysely';
import { builderTransaction, type ConnectSettings, type Connector } from './connector.js';
import { loadDriver } from './drivers.js';
import { unreachable } from './errors.js';
import { openSession } from './session.js';

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

/** Opens a pg pool on `url`. @internal */
export async function connectPostgres(url: string, settings: ConnectSettings): Promise<Connector> {
  const { logger, connectTimeoutMs } = settings;
  const pg = await loadDriver<PgModule>('postgres', settings.driver);
  const pool = new pg.Pool({
    connectionString: url,
    max: settings.poolSize,
    connectionTimeoutMillis: connectTimeoutMs,
  });
  // An idle pooled client whose server connection dies emits 'error' on the pool; without a
  // listener that would crash the process. The pool discards the client by itself.
  pool.on('error', (err) => logger.warn({ err }, 'idle PostgreSQL connection lost'));
  try {
    await pool.query('select 1');
  } catch (cause) {
    await pool.end().catch(() => {});
    throw unreachable('PostgreSQL', settings.shownUrl, cause);
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
  return {
    dialect: new PostgresDialect({ pool: guardedPool as never }),
    sessions: {
      dialect: 'postgres',
      open: () => openSession.postgres(pg.Client, url, connectTimeoutMs),
    },
    transaction: builderTransaction,
    close: () => pool.end(),
  };
}

/** Opens a mysql2 pool on `url`. @internal */
export async function connectMysql(url: string, settings: ConnectSettings): Promise<Connector> {
  const mysql = await loadDriver<MysqlModule>('mysql', settings.driver);
  const config = {
    uri: url,
    connectTimeout: settings.connectTimeoutMs,
    supportBigNumbers: true,
    bigNumberStrings: true,
    timezone: 'Z',
  };
  const pool = mysql.createPool({ ...config, connectionLimit: settings.poolSize });
  pool.on('error', (err) => settings.logger.warn({ err }, 'MySQL pool error'));
  try {
    await new Promise<void>((resolve, reject) =>
      pool.query('select 1', (err) => (err ? reject(err) : resolve())),
    );
  } catch (cause) {
    await new Promise<void>((resolve) => pool.end(() => resolve()));
    throw unreachable('MySQL', settings.shownUrl, cause);
  }
  return {
    dialect: new MysqlDialect({ pool: pool as never }),
    sessions: {
      dialect: 'mysql',
      open: () => openSession.mysql(mysql.createConnection, config),
    },
    transaction: builderTransaction,
    close: () =>
      new Promise<void>((resolve, reject) => pool.end((err) => (err ? reject(err) : resolve()))),
  };
}
