// `preparedStatements` on PostgreSQL: statements with parameters are prepared by name on each
// pooled connection from their second use, at most as many as the option says; a table changed
// under a prepared statement costs one failed call, not a broken connection; off by default.
// What the server holds is read from `pg_prepared_statements` on the same connection (a pool of one).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { openDatabase, sql, type Database } from '../src/index.js';

const [backend] = await sqlBackends('sql_pg_statements', ['postgres']);

describe.skipIf(!backend!.available)('preparedStatements on PostgreSQL', () => {
  let fresh: FreshDatabase;
  const opened: Database[] = [];
  beforeAll(async () => {
    fresh = await backend!.create();
    const setup = await openDatabase(fresh.url, { poolSize: 1 });
    await sql`create table kv (id integer primary key, v text)`.execute(setup.db);
    await sql`insert into kv values (1, 'a'), (2, 'b'), (3, 'c')`.execute(setup.db);
    await setup.close();
  });
  afterAll(async () => {
    for (const database of opened) await database.close();
    await fresh?.drop();
  });

  const open = async (preparedStatements?: number) => {
    const database = await openDatabase(fresh.url, { poolSize: 1, preparedStatements });
    opened.push(database);
    return database;
  };
  /** The statements this process prepared on the pool's one connection, and how often each ran. */
  const prepared = async (database: Database) =>
    (
      await sql<{ statement: string; generic_plans: string; custom_plans: string }>`
        select statement, generic_plans, custom_plans from pg_prepared_statements
        where name like 'rigging_%' order by prepare_time`.execute(database.db)
    ).rows.map((r) => ({
      statement: r.statement,
      runs: Number(r.generic_plans) + Number(r.custom_plans),
    }));
  const byId = (database: Database, id: number) =>
    database.db.selectFrom('kv').select('v').where('id', '=', id).executeTakeFirst();

  it('prepares a statement with parameters at its second use, then only executes it', async () => {
    const database = await open(10);
    expect(await byId(database, 1)).toEqual({ v: 'a' });
    expect(await prepared(database)).toEqual([]);
    for (const id of [2, 3, 1, 2]) expect(await byId(database, id)).toEqual({ v: 'abc'[id - 1] });
    expect(await prepared(database)).toEqual([
      { statement: 'select "v" from "kv" where "id" = $1', runs: 4 },
    ]);
    // In a transaction too, and writes: the same connection, the same names.
    await database.transaction(async (trx) => {
      for (const v of ['x', 'y'])
        await trx.updateTable('kv').set({ v }).where('id', '=', 3).execute();
    });
    expect(await byId(database, 3)).toEqual({ v: 'y' });
    expect((await prepared(database)).map((p) => p.statement)).toEqual([
      'select "v" from "kv" where "id" = $1',
      'update "kv" set "v" = $1 where "id" = $2',
    ]);
    await database.db.updateTable('kv').set({ v: 'c' }).where('id', '=', 3).execute();
  });

  it('names at most as many statements as it is allowed; the others still run', async () => {
    const database = await open(2);
    for (let round = 0; round < 3; round++) {
      for (const column of ['id', 'v'] as const) {
        for (const op of ['=', '<>'] as const) {
          const rows = await database.db
            .selectFrom('kv')
            .select('id')
            .where(column, op, column === 'id' ? 1 : 'a')
            .execute();
          expect(rows.length).toBe(op === '=' ? 1 : 2);
        }
      }
    }
    expect(await prepared(database)).toHaveLength(2);
  });

  it('a table changed under a prepared statement fails that call once, then runs prepared again', async () => {
    const database = await open(10);
    const all = (id: number) =>
      database.db.selectFrom('kv').selectAll().where('id', '=', id).executeTakeFirst();
    await all(1);
    await all(1);
    expect(await prepared(database)).toHaveLength(1);
    const other = await open(0);
    await sql`alter table kv add column note text`.execute(other.db);
    try {
      const first = await all(1).catch((error: unknown) => error);
      // The server refuses the old plan (its result type changed): one failure, or none if the
      // server re-planned on its own.
      if (first instanceof Error) expect(first).toMatchObject({ code: '0A000' });
      expect(await all(1)).toEqual({ id: 1, v: 'a', note: null });
      expect(await all(2)).toEqual({ id: 2, v: 'b', note: null });
    } finally {
      await sql`alter table kv drop column note`.execute(other.db);
    }
  });

  it('a statement the server refuses keeps being refused with its own error', async () => {
    const database = await open(10);
    for (let i = 0; i < 3; i++) {
      const error = await sql`select * from missing_table where id = ${i}`
        .execute(database.db)
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: '42P01' });
    }
    expect(await byId(database, 1)).toEqual({ v: 'a' });
  });

  it('is off by default and with 0', async () => {
    for (const database of [await open(), await open(0)]) {
      for (let i = 0; i < 3; i++) await byId(database, 1);
      expect(await prepared(database)).toEqual([]);
    }
  });
});
