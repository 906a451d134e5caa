// Migration `rigging-async-queue-prefix`: every table a rigging package creates is named
// `rigging_<package>_*`, and 0.1.0 named this package's `rigging_queue_*`. The tables, their
// indexes (and the primary keys PostgreSQL names) and the PostgreSQL functions take the package's
// prefix in place, rows kept.
import type { Migration } from '@rigging/sql';
import { sql } from '../sql-peer.js';
import { NAMES, NAMES_0_1 } from './names.js';
import { claimByKeyFunction, enqueueFunction, succeedManyFunction } from './pg-functions.js';
import type { Db } from './rows.js';

const TABLES = [
  [NAMES_0_1.ops, NAMES.ops],
  [NAMES_0_1.keys, NAMES.keys],
] as const;

/** Whether `name` is under the old prefix, `rigging_queue_`. */
const isOld = (name: string): boolean => name.startsWith(`${NAMES_0_1.prefix}_`);

/** The name under the new prefix of an object named under the old one. */
const renamed = (name: string): string => NAMES.prefix + name.slice(NAMES_0_1.prefix.length);

/**
 * PostgreSQL, in the migration's transaction: the functions' bodies name the old tables, so they
 * are dropped and created again under (and naming) the new names; renaming an index renames the
 * primary key it backs. `rigging_queue_succeed_v1`, unused since 0.1.0, is dropped for good.
 */
async function renamePostgres(db: Db): Promise<void> {
  const { succeedFn, claimFn, succeedManyFn, enqueueFn } = NAMES_0_1;
  await sql
    .raw(`drop function if exists ${[succeedFn, claimFn, succeedManyFn, enqueueFn].join(', ')}`)
    .execute(db);
  for (const [from, to] of TABLES) {
    await sql.raw(`alter table ${from} rename to ${to}`).execute(db);
    const { rows } = await sql<{ qualified: string; name: string }>`
      select x.indexrelid::regclass::text as qualified, i.relname as name
      from pg_index x join pg_class i on i.oid = x.indexrelid
      where x.indrelid = ${to}::regclass
    `.execute(db);
    for (const index of rows.filter((r) => isOld(r.name))) {
      await sql.raw(`alter index ${index.qualified} rename to ${renamed(index.name)}`).execute(db);
    }
  }
  for (const text of [claimByKeyFunction, succeedManyFunction, enqueueFunction]) {
    await sql.raw(text(NAMES)).execute(db);
  }
}

/**
 * MySQL/MariaDB, which commit each DDL statement at once: one statement per table renames it and
 * its indexes together, and a table already renamed is skipped, so that migrating again after a
 * failure between the two carries on.
 */
async function renameMysql(db: Db): Promise<void> {
  for (const [from, to] of TABLES) {
    const { rows } = await sql<{ name: string }>`
      select distinct index_name as name from information_schema.statistics
      where table_schema = database() and table_name = ${from}
    `.execute(db);
    if (rows.length === 0) continue; // renamed already (every table has its primary key)
    const renames = rows
      .filter((r) => isOld(r.name))
      .map((r) => `rename index ${r.name} to ${renamed(r.name)}`);
    await sql.raw(`alter table ${from} ${[...renames, `rename to ${to}`].join(', ')}`).execute(db);
  }
}

/**
 * SQLite, in the migration's transaction: renaming a table updates its indexes' definitions, but
 * an index cannot be renamed, so each is dropped and created again from its own definition under
 * its new name. (The primary key's constraint name stays in the table's text, where SQLite
 * ignores it; its automatic index follows the table's name.)
 */
async function renameSqlite(db: Db): Promise<void> {
  for (const [from, to] of TABLES) {
    await sql.raw(`alter table ${from} rename to ${to}`).execute(db);
    const { rows } = await sql<{ name: string; sql: string }>`
      select name, sql from sqlite_master
      where type = 'index' and tbl_name = ${to} and sql is not null
    `.execute(db);
    for (const index of rows.filter((r) => isOld(r.name))) {
      await sql.raw(`drop index "${index.name}"`).execute(db);
      await sql.raw(index.sql.replace(index.name, renamed(index.name))).execute(db);
    }
  }
}

/** Renames the objects of 0.1.0 to the package's prefix (see the top of this file). @internal */
export const renameToPackagePrefix: Migration = {
  name: 'rigging-async-queue-prefix',
  async up(db, { dialect }) {
    if (dialect === 'postgres') await renamePostgres(db);
    else if (dialect === 'mysql') await renameMysql(db);
    else await renameSqlite(db);
  },
};
