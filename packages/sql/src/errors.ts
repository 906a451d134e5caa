import { RiggingError, type RiggingErrorOptions } from '@rigging/core';

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

export class SqlError extends RiggingError<SqlErrorCode> {
  override readonly name = 'SqlError';
  constructor(code: SqlErrorCode, message: string, options?: RiggingErrorOptions) {
    super(code, message, options);
  }
}
