import { sql, type Kysely } from 'kysely';
import { SqlError } from './errors.js';
import type { Dialect } from './dialect.js';

/** One schema change of a package. Migrations run in array order; the index + 1 is the version. */
export interface Migration {
  /** A stable name, recorded with the version (renaming an applied migration is an error). */
  name: string;
  /**
   * Applies the change. Runs once per database, in a transaction where the dialect allows DDL in
   * one (PostgreSQL, SQLite); `context.dialect` lets one migration branch on the dialect.
   */
  up(db: Kysely<any>, context: { dialect: Dialect }): Promise<void>;
}

/** What {@link Database.migrate} did. */
export interface MigrateResult {
  /** The namespace migrated. */
  namespace: string;
  /** Names applied by this call, in order. */
  applied: string[];
  /** The schema version after this call. */
  version: number;
}

const NAMESPACE = /^[a-z][a-z0-9_.-]{0,63}$/;
const TABLE = 'rigging_migrations';

function validate(namespace: string, migrations: readonly Migration[]): void {
  if (typeof namespace !== 'string' || !NAMESPACE.test(namespace)) {
    throw new TypeError(
      `migration namespace must match ${String(NAMESPACE)}, got ${JSON.stringify(namespace)}`,
    );
  }
  if (!Array.isArray(migrations)) throw new TypeError('migrations must be an array');
  const names = new Set<string>();
  for (const [i, m] of migrations.entries()) {
    if (!m || typeof m.name !== 'string' || !m.name || typeof m.up !== 'function') {
      throw new SqlError(
        'sql.invalid_migrations',
        `migration #${i + 1} of '${namespace}' needs a name and an up() function`,
      );
    }
    if (names.has(m.name)) {
      throw new SqlError(
        'sql.invalid_migrations',
        `migration name '${m.name}' appears twice in '${namespace}'`,
      );
    }
    names.add(m.name);
  }
}

async function ensureTable(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable(TABLE)
    .ifNotExists()
    .addColumn('namespace', 'varchar(64)', (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('name', 'varchar(255)', (c) => c.notNull())
    .addColumn('applied_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('rigging_migrations_pk', ['namespace', 'version'])
    .execute();
}

async function pending(
  db: Kysely<any>,
  namespace: string,
  migrations: readonly Migration[],
): Promise<{ start: number }> {
  const rows = (await db
    .selectFrom(TABLE)
    .select(['version', 'name'])
    .where('namespace', '=', namespace)
    .orderBy('version')
    .execute()) as { version: number | string; name: string }[];
  for (const row of rows) {
    const version = Number(row.version);
    const known = migrations[version - 1];
    if (!known) {
      throw new SqlError(
        'sql.schema_too_new',
        `the database has '${namespace}' migration ${version} (${row.name}) but this version of the code knows only ${migrations.length}: it was migrated by a newer release; upgrade the code or use another database`,
        { details: { namespace, databaseVersion: rows.length, codeVersion: migrations.length } },
      );
    }
    if (known.name !== row.name) {
      throw new SqlError(
        'sql.migration_mismatch',
        `'${namespace}' migration ${version} is '${row.name}' in the database but '${known.name}' in the code`,
        { details: { namespace, version, database: row.name, code: known.name } },
      );
    }
  }
  return { start: rows.length };
}

async function applyAll(
  trx: Kysely<any>,
  dialect: Dialect,
  namespace: string,
  migrations: readonly Migration[],
  start: number,
  wrap: (step: () => Promise<void>) => Promise<void> = (step) => step(),
): Promise<string[]> {
  const applied: string[] = [];
  for (let i = start; i < migrations.length; i++) {
    const m = migrations[i]!;
    try {
      await wrap(async () => {
        await m.up(trx, { dialect });
        await trx
          .insertInto(TABLE)
          .values({ namespace, version: i + 1, name: m.name, applied_at: Date.now() })
          .execute();
      });
    } catch (cause) {
      throw new SqlError(
        'sql.migration_failed',
        `'${namespace}' migration ${i + 1} (${m.name}) failed: ${(cause as Error).message}${
          dialect === 'mysql'
            ? `; MySQL commits DDL implicitly, so the DDL statements of this migration that ran before the failure stay applied (its other statements were rolled back${applied.length ? `, and the ${applied.length} earlier migration(s) of this call are recorded` : ''}): undo them by hand or make the migration idempotent, then migrate again`
            : '; nothing of this call was applied: fix the migration and migrate again'
        }`,
        { cause, details: { namespace, version: i + 1, name: m.name } },
      );
    }
    applied.push(m.name);
  }
  return applied;
}

/**
 * What migrations need of the database they run on (a `Database` has it): its Kysely instance,
 * its dialect and its retrying transactions. @internal
 */
export interface MigrationTarget {
  readonly db: Kysely<any>;
  readonly dialect: Dialect;
  transaction<T>(fn: (trx: Kysely<any>) => Promise<T>): Promise<T>;
}

/** Applies the pending `migrations` of `namespace` to `database` (see `Database.migrate`). */
export async function runMigrations(
  database: MigrationTarget,
  namespace: string,
  migrations: readonly Migration[],
): Promise<MigrateResult> {
  validate(namespace, migrations);
  const { db, dialect } = database;
  let applied: string[];
  if (dialect === 'postgres') {
    // One transaction, serialized across processes by a transaction-scoped advisory lock.
    applied = await db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(${0x72696767}, 0)`.execute(trx);
      await ensureTable(trx);
      const { start } = await pending(trx, namespace, migrations);
      return applyAll(trx, dialect, namespace, migrations, start);
    });
  } else if (dialect === 'sqlite') {
    applied = await database.transaction(async (trx) => {
      await ensureTable(trx);
      const { start } = await pending(trx, namespace, migrations);
      return applyAll(trx, dialect, namespace, migrations, start);
    });
  } else {
    // MySQL: DDL commits implicitly, so serialize with a named lock (one per database) held by
    // one connection, run each migration in its own transaction (its DML after its last DDL
    // rolls back on failure) and record it in that same transaction.
    applied = await db.connection().execute(async (conn) => {
      const got = await sql<{
        ok: number | string | null;
      }>`select get_lock(concat('rigging_migrations_', md5(database())), 60) as ok`.execute(conn);
      if (Number(got.rows[0]?.ok) !== 1) {
        throw new SqlError(
          'sql.migration_failed',
          `timed out after 60 s waiting for another process migrating this database ('${namespace}'); retry, or find the stuck process`,
          { details: { namespace } },
        );
      }
      try {
        await ensureTable(conn);
        const { start } = await pending(conn, namespace, migrations);
        return await applyAll(conn, dialect, namespace, migrations, start, async (step) => {
          // autocommit off: after a DDL's implicit commit, the next statements open a new
          // transaction instead of committing one by one.
          await sql`set autocommit = 0`.execute(conn);
          try {
            await step();
            await sql`commit`.execute(conn);
          } catch (error) {
            await sql`rollback`.execute(conn).catch(() => {});
            throw error;
          } finally {
            await sql`set autocommit = 1`.execute(conn).catch(() => {});
          }
        });
      } finally {
        await sql`select release_lock(concat('rigging_migrations_', md5(database())))`.execute(
          conn,
        );
      }
    });
  }
  return { namespace, applied, version: migrations.length };
}
