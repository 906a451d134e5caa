import { positiveOption } from '@rigging/core';
import type { Database } from '@rigging/sql';
import type { QueueBackend } from './backend.js';
import { SqlQueueBackend } from './sql/backend.js';
import type { QueueDialect } from './sql/dialects/dialect.js';
import { MysqlDialect } from './sql/dialects/mysql.js';
import { PostgresDialect } from './sql/dialects/postgres.js';
import { SqliteDialect } from './sql/dialects/sqlite.js';

export { migrations } from './sql/schema.js';

/** Options of {@link sqlBackend}. */
export interface SqlBackendOptions {
  /**
   * The queue's name: queues with the same name on one database share ops (the jobboard);
   * different names are independent. @default 'default'
   */
  name?: string;
  /**
   * How often workers look for work that no wake-up announced (other processes' enqueues on
   * SQLite/MySQL, expired leases, due retries). @default 250 (SQLite, MySQL), 2000 (PostgreSQL)
   */
  pollMs?: number;
  /** PostgreSQL: LISTEN/NOTIFY wake-ups. @default true */
  notify?: boolean;
}

function dialectOf(database: Database, options: SqlBackendOptions): QueueDialect {
  switch (database.dialect) {
    case 'postgres':
      return new PostgresDialect(options.notify ?? true);
    case 'mysql':
      return new MysqlDialect();
    case 'sqlite':
      return new SqliteDialect();
    default:
      throw new TypeError(`sqlBackend: unsupported dialect ${String(database.dialect)}`);
  }
}

/**
 * The durable jobboard over `@rigging/sql` (SQLite, PostgreSQL, MySQL/MariaDB). Tables
 * `rigging_async_queue_ops` and `rigging_async_queue_keys`, created by
 * `database.migrate('async-queue')` on first use (and renamed from 0.1.0's `rigging_queue_*`).
 * Many queue instances, in many processes, may share one database and queue name.
 * The database stays the caller's: closing the queue does not close it.
 */
export function sqlBackend(database: Database, options: SqlBackendOptions = {}): QueueBackend {
  const name = options.name ?? 'default';
  if (typeof name !== 'string' || !/^[\w.:-]{1,64}$/.test(name)) {
    throw new TypeError(
      `sqlBackend: name must be 1-64 word characters, got ${JSON.stringify(name)}`,
    );
  }
  const dialect = dialectOf(database, options);
  const pollMs = positiveOption('sqlBackend', 'pollMs', options.pollMs, dialect.defaultPollMs);
  return new SqlQueueBackend(database, dialect, name, pollMs);
}
