/** `database.transaction`: one attempt after another while the failure is a retryable conflict. */
import { nonNegativeIntegerOption, sleep, type Logger } from '@rigging/core';
import {
  CompiledQuery,
  PostgresAdapter,
  type Compilable,
  type IsolationLevel,
  type Kysely,
  type RawBuilder,
} from 'kysely';
import type { Connector } from './connector.js';
import { WITH_COMMIT } from './pg-pipeline.js';
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

const WITH_COMMIT_BRAND = Symbol('rigging.sql.withCommit');

/** A Kysely query builder, or a `sql` template (compiled with the transaction). */
export type LastStatement = Compilable | RawBuilder<unknown>;

/** What `fn` of `database.transaction` returns to have a last statement sent with the commit. */
export interface WithCommit<T> {
  readonly [WITH_COMMIT_BRAND]: true;
  /** The last statement: a query that returns no rows (its result is not read). */
  readonly statement: LastStatement;
  /** What the transaction resolves with once it has committed. */
  readonly value: T;
}

/** What a transaction whose `fn` resolves with `T` resolves with: `WithCommit`'s value unwrapped. */
type Settled<T> = T extends WithCommit<infer V> ? V : T;

/**
 * Returned by the `fn` of `database.transaction`: `statement` is the transaction's last, and the
 * transaction resolves with `value`. On PostgreSQL the statement travels with the COMMIT, in one
 * round trip; elsewhere it runs just before it. Either way, if it fails, the transaction rolls
 * back and rejects with its error: make a statement whose outcome you must check fail on its own
 * (a constraint, or a row count checked in SQL) rather than return something to read.
 */
export function withCommit<T>(statement: LastStatement, value: T): WithCommit<T> {
  if (!statement || typeof (statement as Partial<Compilable>).compile !== 'function') {
    throw new TypeError('withCommit(statement, value): statement must be a Kysely query');
  }
  return { [WITH_COMMIT_BRAND]: true, statement, value };
}

/**
 * Sends `statement` with the commit of the transaction `trx` runs (call it inside
 * `database.transaction`): on PostgreSQL it is held back and travels with the COMMIT, ahead of the
 * statement of `withCommit` and after those held before it, all in one round trip (a statement
 * the transaction sends meanwhile takes the held ones with it first); elsewhere it runs now. Its
 * result is not read, and the returned promise does not wait for it: if it fails, the transaction
 * rolls back and rejects with its error, so make a statement whose outcome you must check fail on
 * its own (a constraint, or a row count checked in SQL).
 */
export async function sendWithCommit(trx: Kysely<any>, statement: LastStatement): Promise<void> {
  if (!statement || typeof (statement as Partial<Compilable>).compile !== 'function') {
    throw new TypeError('sendWithCommit(trx, statement): statement must be a Kysely query');
  }
  const compiled = (statement as RawBuilder<unknown>).compile(trx);
  await trx.executeQuery(
    trx.getExecutor().adapter instanceof PostgresAdapter
      ? CompiledQuery.raw(`${WITH_COMMIT}${compiled.sql}`, [...compiled.parameters])
      : compiled,
  );
}

const isWithCommit = (x: unknown): x is WithCommit<unknown> =>
  typeof x === 'object' && x !== null && WITH_COMMIT_BRAND in x;

/** Sends `out`'s last statement with the commit (see `sendWithCommit`), or returns `out`. */
async function settle<DB, T>(trx: Kysely<DB>, out: T): Promise<Settled<T>> {
  if (!isWithCommit(out)) return out as Settled<T>;
  await sendWithCommit(trx, out.statement);
  return out.value as Settled<T>;
}

/** Runs `fn` in a transaction, retrying conflicts with a jittered backoff. @internal */
export async function runTransaction<DB, T>(
  scope: TransactionScope<DB>,
  body: (trx: Kysely<DB>) => Promise<T>,
  options: TransactionOptions,
): Promise<Settled<T>> {
  const fn = async (trx: Kysely<DB>) => settle(trx, await body(trx));
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
