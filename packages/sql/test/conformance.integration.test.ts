import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnNode, sqlBackends, type FreshDatabase } from '@rigging/testkit';
import {
  isConnectionError,
  isRetryableError,
  isUniqueViolation,
  openDatabase,
  sql,
  type Database,
  type Migration,
} from '../src/index.js';
import { raceMigrations } from './fixtures/migrations.js';

const migrateChild = fileURLToPath(new URL('./fixtures/migrate-child.ts', import.meta.url));

const backends = await sqlBackends('sql_conf');

const migrations: Migration[] = [
  {
    name: 'create items',
    up: async (db) => {
      await db.schema
        .createTable('items')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('name', 'varchar(100)', (c) => c.notNull())
        .execute();
    },
  },
  {
    name: 'add qty',
    up: async (db) => {
      await db.schema
        .alterTable('items')
        .addColumn('qty', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
];

describe.each(backends)('$kind', (backend) => {
  let fresh: FreshDatabase;
  let database: Database;
  beforeAll(async () => {
    if (!backend.available) return;
    fresh = await backend.create();
    database = await openDatabase(fresh.url);
  });
  afterAll(async () => {
    await database?.close();
    await fresh?.drop();
  });

  it.skipIf(!backend.available)('migrates once and records versions per namespace', async () => {
    const first = await database.migrate('conf', migrations);
    expect(first.applied).toEqual(['create items', 'add qty']);
    const again = await database.migrate('conf', migrations);
    expect(again.applied).toEqual([]);
    expect(again.version).toBe(2);
    await database.db.insertInto('items').values({ id: 1, name: 'a', qty: 3 }).execute();
    const rows = await database.db.selectFrom('items').selectAll().execute();
    expect(rows).toEqual([{ id: 1, name: 'a', qty: 3 }]);
  });

  it.skipIf(!backend.available)('refuses a database migrated by a newer version', async () => {
    await expect(database.migrate('conf', migrations.slice(0, 1))).rejects.toMatchObject({
      code: 'sql.schema_too_new',
    });
  });

  it.skipIf(!backend.available)('transaction commits, rolls back on error', async () => {
    await database.transaction(async (trx) => {
      await trx.insertInto('items').values({ id: 2, name: 'b' }).execute();
    });
    await expect(
      database.transaction(async (trx) => {
        await trx.insertInto('items').values({ id: 3, name: 'c' }).execute();
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    const ids = (await database.db.selectFrom('items').select('id').orderBy('id').execute()).map(
      (r) => Number(r.id),
    );
    expect(ids).toEqual([1, 2]);
  });

  it.skipIf(!backend.available)('recognises unique violations, not as retryable', async () => {
    const e = await database.db
      .insertInto('items')
      .values({ id: 1, name: 'again' })
      .execute()
      .catch((err: unknown) => err);
    expect(isUniqueViolation(e)).toBe(true);
    expect(isRetryableError(e)).toBe(false);
    expect(isConnectionError(e)).toBe(false);
    // A transaction does not retry it: the callback runs once and the error surfaces as is.
    let calls = 0;
    const t = await database
      .transaction(async (trx) => {
        calls++;
        await trx.insertInto('items').values({ id: 1, name: 'again' }).execute();
      })
      .catch((err: unknown) => err);
    expect(isUniqueViolation(t)).toBe(true);
    expect(calls).toBe(1);
  });

  it.skipIf(!backend.available)('sessions run raw queries on a dedicated connection', async () => {
    await using session = await database.session();
    const param = database.dialect === 'postgres' ? '$1' : '?';
    const r = await session.query<{ n: number | string }>(`select ${param} + 1 as n`, [41]);
    expect(Number(r.rows[0]!.n)).toBe(42);
    const k = await sql<{ n: number }>`select 1 as n`.execute(session.db);
    expect(Number(k.rows[0]!.n)).toBe(1);
    expect(session.lost.aborted).toBe(false);
  });

  it.skipIf(!backend.available)(
    'refuses a renamed migration (sql.migration_mismatch)',
    async () => {
      const renamed = [{ ...migrations[0]!, name: 'create the items' }, migrations[1]!];
      const e = await database.migrate('conf', renamed).catch((err: unknown) => err);
      expect(e).toMatchObject({
        code: 'sql.migration_mismatch',
        details: {
          namespace: 'conf',
          version: 1,
          database: 'create items',
          code: 'create the items',
        },
      });
    },
  );

  it.skipIf(!backend.available)(
    'rejects invalid migration lists before touching anything',
    async () => {
      const up = async () => {};
      await expect(database.migrate('Bad Name!', [])).rejects.toThrow(TypeError);
      await expect(
        database.migrate('dup', [
          { name: 'a', up },
          { name: 'a', up },
        ]),
      ).rejects.toMatchObject({ code: 'sql.invalid_migrations' });
      await expect(database.migrate('dup', [{ name: '', up }])).rejects.toMatchObject({
        code: 'sql.invalid_migrations',
      });
    },
  );

  it.skipIf(!backend.available)(
    'a migration failing halfway names itself and leaves nothing half-applied',
    async () => {
      const first: Migration = {
        name: 'create half_a',
        up: async (db) => {
          await db.schema.createTable('half_a').addColumn('id', 'integer').execute();
          await db.insertInto('half_a').values({ id: 1 }).execute();
        },
      };
      const failing: Migration = {
        name: 'create half_b then fail',
        up: async (db) => {
          await db.schema.createTable('half_b').ifNotExists().addColumn('id', 'integer').execute();
          await db.insertInto('half_a').values({ id: 2 }).execute();
          await sql`select * from no_such_table`.execute(db);
        },
      };
      const e = await database.migrate('half', [first, failing]).catch((err: unknown) => err);
      expect(e).toMatchObject({
        code: 'sql.migration_failed',
        details: { namespace: 'half', version: 2, name: 'create half_b then fail' },
      });
      expect((e as Error).message).toContain("'half' migration 2 (create half_b then fail) failed");
      const recorded = await database.db
        .selectFrom('rigging_migrations')
        .select('name')
        .where('namespace', '=', 'half')
        .execute();
      if (database.dialect === 'mysql') {
        // MySQL commits DDL implicitly: each migration is recorded as soon as it succeeds, so a
        // rerun continues at the failed one. The message says so.
        expect((e as Error).message).toMatch(/MySQL commits DDL implicitly/);
        expect(recorded.map((r) => r.name)).toEqual(['create half_a']);
      } else {
        expect((e as Error).message).toMatch(/nothing of this call was applied/);
        expect(recorded).toEqual([]);
        // Neither the earlier migration of the call nor the failing one's first statements stay.
        await expect(database.db.selectFrom('half_a').selectAll().execute()).rejects.toThrow();
        await expect(database.db.selectFrom('half_b').selectAll().execute()).rejects.toThrow();
      }
      // Fixed, the same list applies cleanly.
      const fixed: Migration = {
        name: failing.name,
        up: async (db) => {
          await db.schema.createTable('half_b').ifNotExists().addColumn('id', 'integer').execute();
        },
      };
      const again = await database.migrate('half', [first, fixed]);
      expect(again.version).toBe(2);
      const ids = await database.db.selectFrom('half_a').select('id').execute();
      expect(ids.map((r) => Number(r.id))).toEqual([1]);
    },
  );

  it.skipIf(!backend.available || backend.kind === 'sqlite-memory')(
    'two processes migrating at once apply each migration exactly once',
    { timeout: 60_000 },
    async () => {
      const children = [spawnNode(migrateChild, [fresh.url]), spawnNode(migrateChild, [fresh.url])];
      try {
        await Promise.all(children.map((c) => c.waitForLine('ready')));
        for (const c of children) c.proc.stdin.write('go\n');
        const results = await Promise.all(
          children.map(async (c) => {
            const line = await c.waitForLine(/^(result|error) /);
            expect(await c.exited, c.stderr()).toBe(0);
            return JSON.parse(line.slice('result '.length)) as { applied: string[] };
          }),
        );
        const applied = results.flatMap((r) => r.applied).sort();
        expect(applied).toEqual(raceMigrations.map((m) => m.name).sort());
        const log = await database.db
          .selectFrom('race_log')
          .select('name')
          .orderBy('name')
          .execute();
        expect(log.map((r) => r.name)).toEqual(raceMigrations.map((m) => m.name).sort());
        const recorded = await database.db
          .selectFrom('rigging_migrations')
          .select(['version', 'name'])
          .where('namespace', '=', 'race')
          .orderBy('version')
          .execute();
        expect(recorded.map((r) => r.name)).toEqual(raceMigrations.map((m) => m.name));
      } finally {
        for (const c of children) c.kill();
      }
    },
  );

  it.skipIf(!backend.available || !backend.kind.startsWith('sqlite'))(
    'SQLite: WAL (files), foreign keys on, on the pool and on sessions',
    async () => {
      const expected = backend.kind === 'sqlite-file' ? 'wal' : 'memory';
      await using session = await database.session();
      for (const db of [database.db, session.db]) {
        const mode = await sql<{ journal_mode: string }>`pragma journal_mode`.execute(db);
        expect(mode.rows[0]?.journal_mode).toBe(expected);
        const fk = await sql<{ foreign_keys: number }>`pragma foreign_keys`.execute(db);
        expect(fk.rows[0]?.foreign_keys).toBe(1);
        const busy = await sql<{ timeout: number }>`pragma busy_timeout`.execute(db);
        expect(busy.rows[0]?.timeout).toBe(5000);
      }
      await sql`create table fk_parent (id integer primary key)`.execute(database.db);
      await sql`create table fk_child (parent integer references fk_parent(id))`.execute(
        database.db,
      );
      await expect(
        sql`insert into fk_child (parent) values (42)`.execute(database.db),
      ).rejects.toThrow(/FOREIGN KEY/);
    },
  );

  it.skipIf(!backend.available)('a closed database refuses work with sql.closed', async () => {
    const other = await openDatabase(fresh.url);
    await other.close();
    await other.close(); // idempotent
    await expect(other.transaction(async () => 1)).rejects.toMatchObject({ code: 'sql.closed' });
    await expect(other.migrate('conf', migrations)).rejects.toMatchObject({ code: 'sql.closed' });
    await expect(other.session()).rejects.toMatchObject({ code: 'sql.closed' });
  });
});
