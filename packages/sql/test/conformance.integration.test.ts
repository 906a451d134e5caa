import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { openDatabase, SqlError, sql, type Database, type Migration } from '../src/index.js';

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

  it.skipIf(!backend.available)('sessions run raw queries on a dedicated connection', async () => {
    await using session = await database.session();
    const param = database.dialect === 'postgres' ? '$1' : '?';
    const r = await session.query<{ n: number | string }>(`select ${param} + 1 as n`, [41]);
    expect(Number(r.rows[0]!.n)).toBe(42);
    const k = await sql<{ n: number }>`select 1 as n`.execute(session.db);
    expect(Number(k.rows[0]!.n)).toBe(1);
    expect(session.lost.aborted).toBe(false);
  });
});

describe('bad input', () => {
  it('rejects unknown schemes and empty URLs', async () => {
    await expect(openDatabase('oracle://x')).rejects.toMatchObject({ code: 'sql.invalid_url' });
    await expect(openDatabase('')).rejects.toMatchObject({ code: 'sql.invalid_url' });
    await expect(openDatabase('sqlite:')).rejects.toBeInstanceOf(SqlError);
  });
  it('says a server is unreachable', async () => {
    await expect(
      openDatabase('postgres://postgres@127.0.0.1:1/x', { connectTimeoutMs: 2000 }),
    ).rejects.toMatchObject({ code: 'sql.unreachable' });
  });
});
