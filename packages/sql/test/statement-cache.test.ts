// The SQLite prepared-statement cache: statements are reused per SQL text, bounded, survive
// schema changes, and never hand out a statement that is still being iterated.
import BetterSqlite from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openDatabase, sql } from '../src/index.js';
import { cachingSqliteHandle, type SqliteHandle } from '../src/sqlite-handle.js';

/** better-sqlite3, counting the statements prepared on the connections it opens. */
function countingDriver() {
  const counter = { prepared: 0 };
  function Counting(filename: string, options?: BetterSqlite.Options) {
    const db = new BetterSqlite(filename, options);
    const prepare = db.prepare.bind(db);
    db.prepare = ((source: string) => {
      counter.prepared++;
      return prepare(source);
    }) as typeof db.prepare;
    return db;
  }
  return { driver: Counting, counter };
}

describe('SQLite statement cache', () => {
  it('prepares each SQL text once', async () => {
    const { driver, counter } = countingDriver();
    await using database = await openDatabase('sqlite::memory:', { driver });
    await sql`create table kv (id integer primary key, v text)`.execute(database.db);
    const before = counter.prepared;
    for (let i = 0; i < 50; i++) {
      await database.db
        .insertInto('kv')
        .values({ id: i, v: `v${i}` })
        .execute();
      await database.db.selectFrom('kv').selectAll().where('id', '=', i).executeTakeFirst();
    }
    expect(counter.prepared - before).toBe(2);
    const row = await database.db
      .selectFrom('kv')
      .select('v')
      .where('id', '=', 7)
      .executeTakeFirst();
    expect(row).toEqual({ v: 'v7' });
  });

  it('can be disabled', async () => {
    const { driver, counter } = countingDriver();
    await using database = await openDatabase('sqlite::memory:', { driver, statementCacheSize: 0 });
    await sql`create table kv (id integer primary key)`.execute(database.db);
    const before = counter.prepared;
    for (let i = 0; i < 5; i++) await database.db.selectFrom('kv').selectAll().execute();
    expect(counter.prepared - before).toBe(5);
  });

  it('follows schema changes (a cached statement sees the new table)', async () => {
    await using database = await openDatabase('sqlite::memory:');
    const db = database.db;
    await sql`create table t (a integer)`.execute(db);
    await sql`insert into t values (1)`.execute(db);
    expect(await db.selectFrom('t').selectAll().execute()).toEqual([{ a: 1 }]);
    await sql`alter table t add column b integer default 7`.execute(db);
    expect(await db.selectFrom('t').selectAll().execute()).toEqual([{ a: 1, b: 7 }]);
    await sql`drop table t`.execute(db);
    await sql`create table t (x text)`.execute(db);
    await sql`insert into t values ('q')`.execute(db);
    expect(await db.selectFrom('t').selectAll().execute()).toEqual([{ x: 'q' }]);
    // A stream stopped early leaves the statement reusable.
    for await (const r of db.selectFrom('t').selectAll().stream()) {
      expect(r).toEqual({ x: 'q' });
      break;
    }
    expect(await db.selectFrom('t').selectAll().execute()).toEqual([{ x: 'q' }]);
  });

  it('is bounded (least recently used evicted) and skips busy statements', () => {
    const raw = new BetterSqlite(':memory:');
    const handle = cachingSqliteHandle(raw as unknown as SqliteHandle, 2);
    const a = handle.prepare('select 1');
    expect(handle.prepare('select 1')).toBe(a);
    const b = handle.prepare('select 2');
    handle.prepare('select 1'); // a is now the most recent
    handle.prepare('select 3'); // evicts b
    expect(handle.prepare('select 1')).toBe(a);
    expect(handle.prepare('select 2')).not.toBe(b);
    raw.exec('create table n (i integer)');
    raw.exec('insert into n values (1), (2)');
    const it = handle.prepare('select i from n') as unknown as BetterSqlite.Statement;
    const iter = it.iterate();
    iter.next();
    const other = handle.prepare('select i from n') as unknown as BetterSqlite.Statement;
    expect(other).not.toBe(it);
    expect(other.all()).toEqual([{ i: 1 }, { i: 2 }]);
    iter.return?.();
    expect(handle.prepare('select i from n')).toBe(it);
    handle.close();
    expect(handle.open).toBe(false);
  });
});
