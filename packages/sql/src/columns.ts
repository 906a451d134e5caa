import type { ColumnDefinitionBuilder } from 'kysely';
import type { Dialect } from './dialect.js';

/**
 * The definition of an integer primary key that the database numbers itself, for a migration on
 * any dialect: `GENERATED ALWAYS AS IDENTITY` on PostgreSQL, `AUTO_INCREMENT` on MySQL/MariaDB and
 * SQLite's `INTEGER PRIMARY KEY` (the rowid). Inserts leave the column out and read the number
 * back (`returning` on PostgreSQL and SQLite, `insertId` on MySQL).
 *
 * @example
 * ```ts
 * up: async (db, { dialect }) => {
 *   await db.schema
 *     .createTable('notes_note')
 *     .addColumn('id', 'integer', identityPrimaryKey(dialect))
 *     .execute();
 * };
 * ```
 */
export function identityPrimaryKey(
  dialect: Dialect,
): (column: ColumnDefinitionBuilder) => ColumnDefinitionBuilder {
  switch (dialect) {
    case 'postgres':
      return (column) => column.generatedAlwaysAsIdentity().primaryKey();
    case 'mysql':
      return (column) => column.autoIncrement().primaryKey();
    case 'sqlite':
      return (column) => column.primaryKey();
  }
}
