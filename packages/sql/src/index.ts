export { openDatabase } from './database.js';
export type { Database, OpenDatabaseOptions } from './database.js';
export { withCommit, sendWithCommit } from './transaction.js';
export { prepareQuery } from './prepared.js';
export type { PreparedQuery, PreparedResult } from './prepared.js';
export type { TransactionOptions, WithCommit, LastStatement } from './transaction.js';
export type { Migration, MigrateResult } from './migrate.js';
export { identityPrimaryKey } from './columns.js';
export type { Session, Notification, QueryResult } from './session.js';
export { SqlError } from './errors.js';
export type { SqlErrorCode } from './errors.js';
export { parseDatabaseUrl, redactUrl } from './url.js';
export type { Dialect } from './dialect.js';
export { isRetryableError, isUniqueViolation, isConnectionError } from './retry.js';
export { sql, CompiledQuery } from 'kysely';
export type {
  Kysely,
  Transaction,
  Selectable,
  Insertable,
  Updateable,
  Generated,
  ColumnType,
  Expression,
  ExpressionBuilder,
  SqlBool,
} from 'kysely';
