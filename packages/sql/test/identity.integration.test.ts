import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import {
  identityPrimaryKey,
  isUniqueViolation,
  openDatabase,
  sql,
  type Database,
  type Generated,
} from '../src/index.js';

const backends = await sqlBackends('sql_identity');

interface Tables {
  things: { id: Generated<number>; name: string };
}

describe.each(backends)('identityPrimaryKey on $kind', (backend) => {
  let fresh: FreshDatabase;
  let database: Database<Tables>;
  beforeAll(async () => {
    if (!backend.available) return;
    fresh = await backend.create();
    database = await openDatabase<Tables>(fresh.url);
    await database.migrate('identity', [
      {
        name: 'create things',
        up: async (db, { dialect }) => {
          await db.schema
            .createTable('things')
            .addColumn('id', 'integer', identityPrimaryKey(dialect))
            .addColumn('name', 'varchar(50)', (c) => c.notNull())
            .execute();
        },
      },
    ]);
  });
  afterAll(async () => {
    await database?.close();
    await fresh?.drop();
  });

  it.skipIf(!backend.available)('numbers rows itself, increasing and unique', async () => {
    for (const name of ['a', 'b', 'c']) {
      await database.db.insertInto('things').values({ name }).execute();
    }
    const rows = await database.db.selectFrom('things').selectAll().orderBy('id').execute();
    expect(rows.map((r) => r.name)).toEqual(['a', 'b', 'c']);
    const ids = rows.map((r) => Number(r.id));
    expect(ids[0]).toBeGreaterThan(0);
    expect(ids[1]).toBeGreaterThan(ids[0]!);
    expect(ids[2]).toBeGreaterThan(ids[1]!);
  });

  it.skipIf(!backend.available)('is a primary key: a duplicate id is refused', async () => {
    const [first] = await database.db.selectFrom('things').select('id').orderBy('id').execute();
    const id = Number(first!.id);
    // PostgreSQL refuses any explicit id (GENERATED ALWAYS) unless told to override, so the
    // duplicate below would fail for that reason alone: override to reach the primary key
    const duplicate =
      backend.kind === 'postgres'
        ? sql`insert into things (id, name) overriding system value values (${id}, 'again')`.execute(
            database.db,
          )
        : database.db
            .insertInto('things')
            .values({ id, name: 'again' } as never)
            .execute();
    const error = await duplicate.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isUniqueViolation(error), String(error)).toBe(true);
    expect((error as { code?: unknown }).code).toBe(
      backend.kind === 'postgres'
        ? '23505'
        : backend.kind === 'mysql'
          ? 'ER_DUP_ENTRY'
          : 'SQLITE_CONSTRAINT_PRIMARYKEY',
    );
  });

  it.skipIf(backend.kind !== 'postgres' || !backend.available)(
    'PostgreSQL numbers every row itself: an explicit id is refused (GENERATED ALWAYS)',
    async () => {
      const explicit = database.db
        .insertInto('things')
        .values({ id: 1_000_000, name: 'explicit' } as never)
        .execute();
      await expect(explicit).rejects.toMatchObject({ code: '428C9' });
    },
  );
});
