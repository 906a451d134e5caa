/** PostgreSQL (pg) and MySQL/MariaDB (mysql2): a pool checked with `select 1` before use. */
import { MysqlDialect, PostgresDialect } from 'kysely';
import { builderTransaction, type ConnectSettings, type Connector } from './connector.js';
import { loadDriver } from './drivers.js';
import { unreachable } from './errors.js';
import type { PgQueryClass } from './pg-pipeline.js';
import { wrapPgClient, type NameableClient, type StatementNaming } from './pg-statements.js';
import { openSession } from './session.js';

interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool;
  Client: new (config: Record<string, unknown>) => unknown;
  /** Absent from drivers that are not pg itself: openings are then sent as they come. */
  Query?: PgQueryClass;
}
interface PgPooledClient extends NameableClient {
  on(event: 'error', fn: (err: Error) => void): void;
}
interface PgPool {
  on(event: 'error', fn: (err: Error) => void): void;
  on(event: 'connect', fn: (client: PgPooledClient) => void): void;
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
  // Shared by the pool's connections: a statement one of them loses turns naming off for all.
  const naming: StatementNaming = { size: settings.preparedStatements, enabled: true, logger };
  // A pooled client whose server connection dies (backend terminated, server restarted) emits
  // 'error' on itself; with no listener that kills the process. pg-pool listens on idle clients
  // only (and re-emits on the pool): it takes its listener off as it hands a client out, within
  // the read that made the client ready, so a FATAL in the same packet (a backend terminated
  // while this process was paused) would be emitted before any code of the caller runs. A
  // listener added at 'connect', which pg-pool emits synchronously before that, stays on the
  // client for its whole life. pg-pool discards the broken client (at once if idle, else at its
  // release).
  pool.on('connect', (client) => {
    client.on('error', (err) => logger.warn({ err }, 'PostgreSQL connection lost'));
    wrapPgClient(client, naming, pg.Query);
  });
  // The same error, already logged above, as pg-pool re-emits it for an idle client.
  pool.on('error', () => {});
  try {
    await pool.query('select 1');
  } catch (cause) {
    await pool.end().catch(() => {});
    throw unreachable('PostgreSQL', settings.shownUrl, cause);
  }
  return {
    dialect: new PostgresDialect({ pool: pool as never }),
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
