/** `database.transaction`: one attempt after another while the failure is a retryable conflict. */
import { nonNegativeIntegerOption, sleep, type Logger } from '@rigging/core';
import type { IsolationLevel, Kysely } from 'kysely';
import type { Connector } from './connector.js';
import { SqlError } from './errors.js';
import { isRetryableError } from './retry.js';
import type { Dialect } from './dialect.js';

/** Options of `database.transaction(fn, options)`. */
export interface TransactionOptions {
  /** Isolation level (PostgreSQL, MySQL; SQLite transactions are always serializable). */
  isolation?: IsolationLevel;
  /**
   * How many times a serialization failure, deadlock or busy database is retried (the whole
   * callback runs again, so keep it free of outside side effects). @default 5
   */
  retries?: number;
  /**
   * Stops the retries: aborted before an attempt or during the wait between two, the transaction
   * rejects with `sql.aborted` (`cause`: `signal.reason`) and makes no further attempt. An attempt
   * already running is not interrupted: it commits or rolls back as usual.
   */
  signal?: AbortSignal;
}

/** What a transaction needs of the database it runs on. @internal */
export interface TransactionScope<DB> {
  db: Kysely<DB>;
  dialect: Dialect;
  connector: Connector;
  logger: Logger;
  /** Aborts when the database is closed, cutting a retry wait short. */
  closing: AbortSignal;
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
  const signal = signalOption('transaction', options.signal);
  for (let attempt = 0; ; attempt++) {
    scope.assertOpen();
    if (signal?.aborted) throw abortedError(signal.reason, attempt);
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
      await pause(Math.min(200, 2 ** attempt * 5) * (0.5 + Math.random()), [signal, scope.closing]);
    }
  }
}

/** `value` when it is an AbortSignal (or `undefined`), else a `TypeError` naming it. */
function signalOption(owner: string, value: unknown): AbortSignal | undefined {
  if (value === undefined) return undefined;
  const signal = value as Partial<AbortSignal> | null;
  if (
    typeof signal === 'object' &&
    signal !== null &&
    typeof signal.aborted === 'boolean' &&
    typeof signal.addEventListener === 'function' &&
    typeof signal.removeEventListener === 'function'
  ) {
    return value as AbortSignal;
  }
  throw new TypeError(`${owner}: signal must be an AbortSignal, got ${String(value)}`);
}

function abortedError(reason: unknown, attempts: number): SqlError {
  return new SqlError(
    'sql.aborted',
    attempts === 0
      ? 'transaction aborted before its first attempt'
      : `transaction aborted after ${attempts} conflicting attempt${attempts === 1 ? '' : 's'}`,
    { cause: reason, details: { attempts } },
  );
}

/** Waits `ms`, or less when one of `signals` aborts; the caller then checks which one did. */
async function pause(ms: number, signals: readonly (AbortSignal | undefined)[]): Promise<void> {
  if (signals.some((s) => s?.aborted)) return;
  const wake = new AbortController();
  const stop = () => wake.abort();
  for (const s of signals) s?.addEventListener('abort', stop, { once: true });
  try {
    await sleep(ms, { signal: wake.signal });
  } catch {
    // Woken early by an abort: the next turn of the loop throws the matching error.
  } finally {
    for (const s of signals) s?.removeEventListener('abort', stop);
  }
}
