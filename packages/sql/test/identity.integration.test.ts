import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { identityPrimaryKey, openDatabase, type Database, type Generated } from '../src/index.js';

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
    const duplicate = database.db
      .insertInto('things')
      .values({ id: first!.id, name: 'again' } as never)
      .execute();
    await expect(duplicate).rejects.toThrow();
  });
});
