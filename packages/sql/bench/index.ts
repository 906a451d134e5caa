// @rigging/sql (openDatabase + Kysely) against the raw driver a user would otherwise call, for a
// primary-key select and a one-row insert transaction, on SQLite and PostgreSQL. Run: pnpm bench
import BetterSqlite from 'better-sqlite3';
import pg from 'pg';
import { Bench } from 'tinybench';
import { freshDatabase, service } from '@rigging/testkit';
import { openDatabase, sendWithCommit, sql, withCommit } from '../src/index.js';

interface Tables {
  bench_kv: { id: number; v: string };
}
const ratios: string[] = [];

async function compare(label: string, ours: () => Promise<unknown>, raw: () => Promise<unknown>) {
  const bench = new Bench({ time: 700, warmupTime: 100 });
  bench.add(`${label} @rigging/sql`, ours).add(`${label} raw driver`, raw);
  await bench.run();
  console.table(bench.table());
  const [a, b] = bench.tasks.map((t) => t.result?.throughput.mean ?? NaN);
  ratios.push(`${label}: @rigging/sql / raw = ${(a! / b!).toFixed(2)}× the throughput`);
}

// SQLite (file, WAL, synchronous=normal on both sides).
{
  const fresh = await freshDatabase('sqlite-file', 'bench');
  const file = fresh.url.slice('sqlite:'.length);
  const database = await openDatabase<Tables>(fresh.url);
  await sql`create table bench_kv (id integer primary key, v text not null)`.execute(database.db);
  await sql`insert into bench_kv (id, v) values (1, 'one')`.execute(database.db);
  const raw = new BetterSqlite(file);
  raw.pragma('journal_mode = WAL');
  raw.pragma('synchronous = normal');
  const get = raw.prepare('select id, v from bench_kv where id = ?');
  const put = raw.prepare('insert into bench_kv (id, v) values (?, ?)');
  const putTx = raw.transaction((id: number) => put.run(id, 'x'));
  let next = 10;
  await compare(
    'sqlite select by id',
    () => database.db.selectFrom('bench_kv').selectAll().where('id', '=', 1).executeTakeFirst(),
    async () => get.get(1),
  );
  await compare(
    'sqlite insert transaction',
    () =>
      database.transaction((trx) =>
        trx.insertInto('bench_kv').values({ id: next++, v: 'x' }).execute(),
      ),
    async () => putTx.immediate(next++),
  );
  // The statement cache (default) against preparing every statement again (statementCacheSize 0).
  const uncached = await openDatabase<Tables>(fresh.url, { statementCacheSize: 0 });
  const cache = new Bench({ time: 700, warmupTime: 100 });
  cache
    .add('sqlite select by id, statement cache', () =>
      database.db.selectFrom('bench_kv').selectAll().where('id', '=', 1).executeTakeFirst(),
    )
    .add('sqlite select by id, no statement cache', () =>
      uncached.db.selectFrom('bench_kv').selectAll().where('id', '=', 1).executeTakeFirst(),
    );
  await cache.run();
  console.table(cache.table());
  const [hit, miss] = cache.tasks.map((t) => t.result?.throughput.mean ?? NaN);
  ratios.push(`sqlite select by id: statement cache / none = ${(hit! / miss!).toFixed(2)}×`);
  await uncached.close();
  raw.close();
  await database.close();
  await fresh.drop();
}

// PostgreSQL (pool of 10 on both sides).
if ((await service('postgres')).available) {
  const fresh = await freshDatabase('postgres', 'bench');
  const database = await openDatabase<Tables>(fresh.url);
  await sql`create table bench_kv (id integer primary key, v text not null)`.execute(database.db);
  await sql`insert into bench_kv (id, v) values (1, 'one')`.execute(database.db);
  const pool = new pg.Pool({ connectionString: fresh.url, max: 10 });
  let next = 10;
  /** The raw driver's transaction: `begin`, one insert per value, `commit`. */
  const rawInserts = async (values: string[]) => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      for (const v of values) {
        await client.query('insert into bench_kv (id, v) values ($1, $2)', [next++, v]);
      }
      await client.query('commit');
    } catch (error) {
      await client.query('rollback');
      throw error;
    } finally {
      client.release();
    }
  };
  await compare(
    'postgres select by id',
    () => database.db.selectFrom('bench_kv').selectAll().where('id', '=', 1).executeTakeFirst(),
    () => pool.query('select id, v from bench_kv where id = $1', [1]),
  );
  await compare(
    'postgres insert transaction',
    () =>
      database.transaction((trx) =>
        trx.insertInto('bench_kv').values({ id: next++, v: 'x' }).execute(),
      ),
    () => rawInserts(['x']),
  );
  // Two statements: BEGIN rides with the first, COMMIT with the last (`withCommit`): two round
  // trips against the raw driver's four.
  await compare(
    'postgres two-insert transaction, withCommit',
    () =>
      database.transaction(async (trx) => {
        await trx.insertInto('bench_kv').values({ id: next++, v: 'x' }).execute();
        return withCommit(trx.insertInto('bench_kv').values({ id: next++, v: 'y' }), null);
      }),
    () => rawInserts(['x', 'y']),
  );
  // Three statements none of which is read: all with the COMMIT (`sendWithCommit`, `withCommit`),
  // one round trip against the raw driver's five.
  await compare(
    'postgres three-insert transaction, all with the commit',
    () =>
      database.transaction(async (trx) => {
        await sendWithCommit(trx, trx.insertInto('bench_kv').values({ id: next++, v: 'x' }));
        await sendWithCommit(trx, trx.insertInto('bench_kv').values({ id: next++, v: 'y' }));
        return withCommit(trx.insertInto('bench_kv').values({ id: next++, v: 'z' }), null);
      }),
    () => rawInserts(['x', 'y', 'z']),
  );
  await pool.end();
  await database.close();
  await fresh.drop();
} else {
  console.log('PostgreSQL unreachable: skipped');
}

console.log(ratios.join('\n'));
