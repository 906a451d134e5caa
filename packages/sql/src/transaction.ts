/** `database.transaction`: one attempt after another while the failure is a retryable conflict. */
import { nonNegativeIntegerOption, sleep, type Logger } from '@rigging/core';
import type { IsolationLevel, Kysely } from 'kysely';
import type { Connector } from './connector.js';
import { SqlError } from './errors.js';
import { isRetryableError } from './retry.js';
import type { Dialect } from './url.js';

/** Options of `database.transaction(fn, options)`. */
export interface TransactionOptions {
  /** Isolation level (PostgreSQL, MySQL; SQLite transactions are always serializable). */
  isolation?: IsolationLevel;
  /**
   * How many times a serialization failure, deadlock or busy database is retried (the whole
   * callback runs again, so keep it free of outside side effects). @default 5
   */
  retries?: number;
}

/** What a transaction needs of the database it runs on. @internal */
export interface TransactionScope<DB> {
  db: Kysely<DB>;
  dialect: Dialect;
  connector: Connector;
  logger: Logger;
  /** Throws `sql.closed` once the database is closed. */
  assertOpen(): void;
}

/** Runs `fn` in a transaction, retrying conflicts with a jittered backoff. @internal */
export async function runTransaction<DB, T>(
  scope: TransactionScope<DB>,
  fn: (trx: Kysely<DB>) => Promise<T>,
  options: TransactionOptions,
): Promise<T> {
  const retries = nonNegativeIntegerOption('transaction', 'retries', options.retries, 5);
  for (let attempt = 0; ; attempt++) {
    scope.assertOpen();
    try {
      return await scope.connector.transaction(scope.db, fn, options.isolation);
    } catch (error) {
      if (!isRetryableError(error, scope.dialect)) throw error;
      if (attempt >= retries) {
        throw new SqlError(
          'sql.transaction_failed',
          `transaction still conflicting after ${retries + 1} attempt${retries === 0 ? '' : 's'}: ${(error as Error).message}; retry later, raise \`retries\` or reduce contention`,
          { cause: error },
        );
      }
      scope.logger.debug({ attempt, err: error }, 'retrying transaction');
      await sleep(Math.min(200, 2 ** attempt * 5) * (0.5 + Math.random()));
    }
  }
}
