import { RiggingError } from '@rigging/core';

/** Every error code `@rigging/sql` throws. */
export type SqlErrorCode =
  | 'sql.invalid_url'
  | 'sql.driver_missing'
  | 'sql.cannot_open'
  | 'sql.unreachable'
  | 'sql.migration_failed'
  | 'sql.migration_mismatch'
  | 'sql.schema_too_new'
  | 'sql.invalid_migrations'
  | 'sql.transaction_failed'
  | 'sql.closed';

/**
 * The error `@rigging/sql` throws: a {@link RiggingError} whose `code` is one of
 * {@link SqlErrorCode}. The driver's own error, when there is one, is kept as `cause`.
 */
export class SqlError extends RiggingError<SqlErrorCode> {
  /** Always `'SqlError'`. */
  override readonly name = 'SqlError';
}
