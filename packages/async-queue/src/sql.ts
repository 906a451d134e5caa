import { positiveOption } from '@rigging/core';
import type { Database } from '@rigging/sql';
import type { QueueBackend } from './backend.js';
import { SqlQueueBackend } from './sql/backend.js';
import type { QueueDialect } from './sql/dialects/dialect.js';
import { mysqlDialect } from './sql/dialects/mysql.js';
import { postgresDialect } from './sql/dialects/postgres.js';
import { sqliteDialect } from './sql/dialects/sqlite.js';
import { Notifier } from './sql/notifier.js';

export { migrations } from './sql/schema.js';
export { Notifier } from './sql/notifier.js';
export type { NotifierListener } from './sql/notifier.js';

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
  /**
   * Connects queue instances of this process that share the database and queue name: they wake
   * each other and settle each other's `call`s at once. Pass one `Notifier` to every backend that
   * should be connected (a producer and a worker in one process, say). @default a new `Notifier`
   * for this backend alone (others are then reached by NOTIFY or polling)
   */
  notifier?: Notifier;
}

function dialectOf(database: Database, options: SqlBackendOptions): QueueDialect {
  switch (database.dialect) {
    case 'postgres':
      return postgresDialect(options.notify ?? true);
    case 'mysql':
      return mysqlDialect();
    case 'sqlite':
      return sqliteDialect();
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
  const notifier = options.notifier ?? new Notifier();
  if (!(notifier instanceof Notifier)) {
    throw new TypeError(`sqlBackend: notifier must be a Notifier, got ${String(notifier)}`);
  }
  return new SqlQueueBackend(database, dialect, name, pollMs, notifier);
}
