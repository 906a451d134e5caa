// Prepared queries (src/prepared.ts): built once per dialect with
// Kysely's builder, then run with new values; the same rows and counts as the builder's own
// queries on every backend, and refused input changes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { openDatabase, prepareQuery, sql, withCommit, type Database } from '../src/index.js';

const backends = await sqlBackends('sql_prepared');

interface Tables {
  prep_items: { id: number; name: string; qty: number; note: string | null };
}

const insertItem = prepareQuery(
  (db, p: { id: number; name: string; qty: number; note: string | null }) =>
    db.insertInto('prep_items').values({ id: p.id, name: p.name, qty: p.qty, note: p.note }),
);
const itemsFrom = prepareQuery((db, p: { min: number; n: number }) =>
  db
    .selectFrom('prep_items')
    .select(['id', 'name', 'qty'])
    .where('id', '>=', p.min)
    .where('name', '<>', 'hidden') // a constant stays a constant
    .orderBy('id')
    .limit(p.n),
);
const addQty = prepareQuery((db, p: { id: number; by: number }) =>
  db
    .updateTable('prep_items')
    .set({ qty: sql<number>`qty + ${p.by}` })
    .where('id', '=', p.id),
);

describe.each(backends)('$kind', (backend) => {
  let fresh: FreshDatabase;
  let database: Database<Tables>;
  beforeAll(async () => {
    if (!backend.available) return;
    fresh = await backend.create();
    database = await openDatabase<Tables>(fresh.url);
    await database.db.schema
      .createTable('prep_items')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('name', 'varchar(100)', (c) => c.notNull())
      .addColumn('qty', 'integer', (c) => c.notNull())
      .addColumn('note', 'varchar(100)')
      .execute();
  });
  afterAll(async () => {
    await database?.close();
    await fresh?.drop();
  });

  it.skipIf(!backend.available)(
    'runs with new values each time, as the builder would',
    async () => {
      for (let id = 1; id <= 6; id++) {
        const r = await insertItem.execute(database.db, {
          id,
          name: id === 4 ? 'hidden' : `n${id}`,
          qty: id * 10,
          note: id % 2 ? null : 'even',
        });
        expect(Number(r.numAffectedRows)).toBe(1);
      }
      const { rows } = await itemsFrom.execute(database.db, { min: 2, n: 3 });
      const built = await database.db
        .selectFrom('prep_items')
        .select(['id', 'name', 'qty'])
        .where('id', '>=', 2)
        .where('name', '<>', 'hidden')
        .orderBy('id')
        .limit(3)
        .execute();
      expect(rows).toEqual(built);
      expect(rows.map((r) => Number(r.id))).toEqual([2, 3, 5]);
      expect((await itemsFrom.execute(database.db, { min: 6, n: 10 })).rows).toEqual([
        { id: 6, name: 'n6', qty: 60 },
      ]);
      const notes = await database.db
        .selectFrom('prep_items')
        .select('note')
        .orderBy('id')
        .execute();
      expect(notes.map((r) => r.note)).toEqual([null, 'even', null, 'even', null, 'even']);
    },
  );

  it.skipIf(!backend.available)(
    'counts the rows it changed, inside a transaction too',
    async () => {
      expect(Number((await addQty.execute(database.db, { id: 1, by: 5 })).numAffectedRows)).toBe(1);
      expect(Number((await addQty.execute(database.db, { id: 99, by: 5 })).numAffectedRows)).toBe(
        0,
      );
      await expect(
        database.transaction(async (trx) => {
          await addQty.execute(trx, { id: 2, by: 1 });
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');
      await database.transaction((trx) => addQty.execute(trx, { id: 3, by: 2 }));
      const qty = await database.db.selectFrom('prep_items').select('qty').orderBy('id').execute();
      expect(qty.slice(0, 3).map((r) => Number(r.qty))).toEqual([15, 20, 32]);
    },
  );

  it.skipIf(!backend.available)(
    "bound, it is a transaction's last statement, sent with the commit",
    async () => {
      const id = await database.transaction(async (trx) => {
        await insertItem.execute(trx, { id: 40, name: 'first', qty: 1, note: null });
        return withCommit(insertItem.bind(trx, { id: 41, name: 'last', qty: 2, note: 'c' }), 41);
      });
      expect(id).toBe(41);
      // A failing last statement (a duplicate key) rolls back the whole transaction.
      await expect(
        database.transaction(async (trx) => {
          await insertItem.execute(trx, { id: 42, name: 'kept?', qty: 3, note: null });
          return withCommit(insertItem.bind(trx, { id: 41, name: 'dup', qty: 4, note: null }), 0);
        }),
      ).rejects.toThrow();
      const rows = await database.db
        .selectFrom('prep_items')
        .select(['id', 'name'])
        .where('id', '>=', 40)
        .orderBy('id')
        .execute();
      expect(rows.map((r) => [Number(r.id), r.name])).toEqual([
        [40, 'first'],
        [41, 'last'],
      ]);
      expect(() =>
        insertItem.bind(database.db, { id: 43, name: 'x', qty: 1, note: undefined as never }),
      ).toThrow(new TypeError("prepareQuery: parameter 'note' is missing (undefined)"));
    },
  );

  it.skipIf(!backend.available)('refuses a missing parameter before anything runs', async () => {
    await expect(
      insertItem.execute(database.db, {
        id: 50,
        name: 'x',
        qty: undefined as unknown as number,
        note: null,
      }),
    ).rejects.toThrow(new TypeError("prepareQuery: parameter 'qty' is missing (undefined)"));
    const row = await database.db
      .selectFrom('prep_items')
      .select('id')
      .where('id', '=', 50)
      .execute();
    expect(row).toEqual([]);
  });
});

describe('prepareQuery', () => {
  it('refuses a build that reads a parameter for anything but a value', async () => {
    await using database = await openDatabase<Tables>('sqlite::memory:');
    const branching = prepareQuery((db, p: { desc: boolean }) =>
      db
        .selectFrom('prep_items')
        .select('id')
        .orderBy('id', p.desc ? 'desc' : 'asc'),
    );
    await expect(branching.execute(database.db, { desc: true })).rejects.toThrow(
      /parameter 'desc' was read but is not a value of the query/,
    );
    expect(() => prepareQuery('select 1' as never)).toThrow(
      new TypeError('prepareQuery: build must be a function, got string'),
    );
  });

  it('builds once per dialect, however often it runs', async () => {
    await using database = await openDatabase<Tables>('sqlite::memory:');
    await sql`create table prep_items (id integer primary key, name text, qty integer, note text)`.execute(
      database.db,
    );
    let builds = 0;
    const byId = prepareQuery((db, p: { id: number }) => {
      builds++;
      return db.selectFrom('prep_items').select('name').where('id', '=', p.id);
    });
    await database.db
      .insertInto('prep_items')
      .values({ id: 1, name: 'a', qty: 0, note: null })
      .execute();
    for (let i = 0; i < 20; i++) {
      const { rows } = await byId.execute(database.db, { id: i % 2 });
      expect(rows).toEqual(i % 2 ? [{ name: 'a' }] : []);
    }
    await database.transaction((trx) => byId.execute(trx, { id: 1 }));
    expect(builds).toBe(1);
  });
});
