import type { Dialect } from './dialect.js';

function codeOf(error: unknown): string | number | undefined {
  const e = error as { code?: string | number; errno?: number } | undefined;
  return e?.code ?? e?.errno;
}

function walk(error: unknown, test: (e: unknown) => boolean): boolean {
  for (let e = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (test(e)) return true;
  }
  return false;
}

/**
 * True for errors that a transaction retry can cure: PostgreSQL serialization failures and
 * deadlocks (40001, 40P01) and a prepared statement that could not run in the transaction
 * (`sql.statement_invalidated`), MySQL deadlocks and lock-wait timeouts (1213, 1205), SQLite busy
 * or locked databases.
 */
export function isRetryableError(error: unknown, dialect?: Dialect): boolean {
  return walk(error, (e) => {
    const code = codeOf(e);
    if (
      (dialect === undefined || dialect === 'postgres') &&
      (code === '40001' || code === '40P01' || code === 'sql.statement_invalidated')
    )
      return true;
    if (
      (dialect === undefined || dialect === 'mysql') &&
      (code === 'ER_LOCK_DEADLOCK' ||
        code === 'ER_LOCK_WAIT_TIMEOUT' ||
        code === 1213 ||
        code === 1205)
    ) {
      return true;
    }
    if (
      (dialect === undefined || dialect === 'sqlite') &&
      typeof code === 'string' &&
      (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'))
    ) {
      return true;
    }
    return false;
  });
}

/** True for a unique / primary key violation on any dialect. */
export function isUniqueViolation(error: unknown): boolean {
  return walk(error, (e) => {
    const code = codeOf(e);
    return (
      code === '23505' ||
      code === 'ER_DUP_ENTRY' ||
      code === 1062 ||
      code === 'SQLITE_CONSTRAINT_UNIQUE' ||
      code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
    );
  });
}

/** True for errors that mean the connection itself is gone (server down, connection killed). */
export function isConnectionError(error: unknown): boolean {
  return walk(error, (e) => {
    const code = codeOf(e);
    const msg = (e as { message?: string }).message ?? '';
    return (
      code === 'ECONNREFUSED' ||
      code === 'ECONNRESET' ||
      code === 'EPIPE' ||
      code === 'ETIMEDOUT' ||
      code === 'ENOTFOUND' ||
      code === 'PROTOCOL_CONNECTION_LOST' ||
      code === '57P01' ||
      code === '57P02' ||
      code === '57P03' ||
      /Connection terminated|connection is closed|Client was closed and is not queryable|Client has encountered a connection error|Can't add new command when connection is in closed state/i.test(
        msg,
      )
    );
  });
}
