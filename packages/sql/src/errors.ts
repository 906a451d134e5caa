import { RiggingError } from '@rigging/core';
import { isConnectionError } from './retry.js';

/** Every error code `@rigging/sql` throws. */
export type SqlErrorCode =
  | 'sql.invalid_url'
  | 'sql.driver_missing'
  | 'sql.driver_unsupported'
  | 'sql.cannot_open'
  | 'sql.unreachable'
  | 'sql.migration_failed'
  | 'sql.migration_mismatch'
  | 'sql.schema_too_new'
  | 'sql.invalid_migrations'
  | 'sql.transaction_failed'
  | 'sql.statement_invalidated'
  | 'sql.aborted'
  | 'sql.closed';

/**
 * The error `@rigging/sql` throws: a {@link RiggingError} whose `code` is one of
 * {@link SqlErrorCode}. The driver's own error, when there is one, is kept as `cause`.
 */
export class SqlError extends RiggingError<SqlErrorCode> {
  /** Always `'SqlError'`. */
  override readonly name = 'SqlError';
}

/** @internal `sql.unreachable`: `what` (an engine) at `url` refused or failed the connection. */
export function unreachable(what: string, url: string, cause: unknown): SqlError {
  const reason = (cause as Error)?.message ?? String(cause);
  const hint = isConnectionError(cause)
    ? 'is the server running and the URL right?'
    : 'check the URL, the credentials and that the database exists';
  return new SqlError(
    'sql.unreachable',
    `cannot connect to ${what} at ${url}: ${reason}; ${hint}`,
    {
      cause,
      details: { url },
    },
  );
}
