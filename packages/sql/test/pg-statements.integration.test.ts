// `preparedStatements` on PostgreSQL: statements with parameters are prepared by name on each
// pooled connection from their second use, at most as many as the option says; a statement the
// server can no longer run is run again unnamed outside a transaction and retried with its
// transaction inside one; a lost one turns naming off for the pool; on by default.
// What the server holds is read from `pg_prepared_statements` on the same connection (a pool of one).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import { isRetryableError, openDatabase, sql, type Database } from '../src/index.js';
import { recordingLogger } from './recording-logger.js';

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

  /** A pool of one connection; its `warn` records land in `warnings`. */
  const open = async (preparedStatements?: number, warnings: string[] = []) => {
    const database = await openDatabase(fresh.url, {
      poolSize: 1,
      preparedStatements,
      logger: recordingLogger('warn', warnings),
    });
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

  it('a table changed under a prepared statement: run again outside a transaction, retried inside', async () => {
    const database = await open(10);
    const text = 'select * from "kv" where "id" = $1';
    const all = (db: Kysely<any>, id: number) =>
      db.selectFrom('kv').selectAll().where('id', '=', id).executeTakeFirst();
    const other = await open(0);
    /** Prepares `select *` on the connection, then adds or drops a column under it. */
    const changeUnderPrepared = async (change: 'add' | 'drop') => {
      await all(database.db, 1);
      await all(database.db, 1);
      expect((await prepared(database)).map((p) => p.statement)).toContain(text);
      await sql
        .raw(`alter table kv ${change === 'add' ? 'add column note text' : 'drop column note'}`)
        .execute(other.db);
    };
    try {
      // Outside a transaction the server refuses the old plan (its result type changed) before
      // running it; the call is run again unnamed and returns the new column.
      await changeUnderPrepared('add');
      expect(await all(database.db, 1)).toEqual({ id: 1, v: 'a', note: null });
      expect(await all(database.db, 2)).toEqual({ id: 2, v: 'b', note: null });
      // In a transaction the refusal aborts it: Kysely's own transaction fails with a retryable
      // error naming the cause...
      await changeUnderPrepared('drop');
      const error = await database.db
        .transaction()
        .execute((trx) => all(trx, 1))
        .catch((e: unknown) => e);
      expect(error).toMatchObject({
        name: 'SqlError',
        code: 'sql.statement_invalidated',
        cause: { code: '0A000' },
      });
      expect(isRetryableError(error, 'postgres')).toBe(true);
      // ... and database.transaction runs it again.
      await changeUnderPrepared('add');
      let attempts = 0;
      const row = await database.transaction(async (trx) => {
        attempts++;
        return all(trx, 1);
      });
      expect({ row, attempts }).toEqual({ row: { id: 1, v: 'a', note: null }, attempts: 2 });
    } finally {
      await sql`alter table kv drop column if exists note`.execute(other.db);
    }
  });

  it('a statement the server lost (DEALLOCATE ALL) runs unnamed, and naming stops for the pool', async () => {
    const warnings: string[] = [];
    const database = await open(10, warnings);
    await byId(database, 1);
    await byId(database, 1);
    expect(await prepared(database)).toHaveLength(1);
    await sql`deallocate all`.execute(database.db);
    expect(await byId(database, 2)).toEqual({ v: 'b' });
    for (const id of [1, 2, 3, 1]) expect(await byId(database, id)).toEqual({ v: 'abc'[id - 1] });
    expect(await prepared(database)).toEqual([]);
    expect(warnings).toEqual([expect.stringMatching(/PostgreSQL lost a statement/)]);
  });

  it('a name already prepared on the server by someone else (42P05) runs unnamed', async () => {
    const warnings: string[] = [];
    const database = await open(10, warnings);
    const text = 'select "v" from "kv" where "id" = $1';
    const name = `rigging_${createHash('sha256').update(text).digest('base64url').slice(0, 32)}_0`;
    await sql.raw(`prepare "${name}" as ${text}`).execute(database.db);
    for (const id of [1, 2, 3]) expect(await byId(database, id)).toEqual({ v: 'abc'[id - 1] });
    expect(warnings).toHaveLength(1);
    await sql`deallocate all`.execute(database.db);
  });

  it('a statement lost in a transaction fails it retryably; database.transaction runs it again', async () => {
    const warnings: string[] = [];
    const database = await open(10, warnings);
    await byId(database, 1);
    await byId(database, 1);
    await sql`deallocate all`.execute(database.db);
    let attempts = 0;
    const v = await database.transaction(async (trx) => {
      attempts++;
      await trx.updateTable('kv').set({ v: 'z' }).where('id', '=', 1).execute();
      return (await trx.selectFrom('kv').select('v').where('id', '=', 1).executeTakeFirst())?.v;
    });
    expect({ v, attempts, warnings: warnings.length }).toEqual({
      v: 'z',
      attempts: 2,
      warnings: 1,
    });
    await database.db.updateTable('kv').set({ v: 'a' }).where('id', '=', 1).execute();
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

  it('is on by default, and off with 0', async () => {
    const byDefault = await open();
    for (let i = 0; i < 3; i++) await byId(byDefault, 1);
    expect(await prepared(byDefault)).toHaveLength(1);
    const off = await open(0);
    for (let i = 0; i < 3; i++) await byId(off, 1);
    expect(await prepared(off)).toEqual([]);
  });
});
