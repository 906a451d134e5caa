// PostgreSQL: a transaction's BEGIN travels with its first statement (one round trip fewer per
// transaction), and the transaction is the same: its statements share one transaction id, a
// failure of the first statement rolls everything back, the isolation level holds, a transaction
// that sends nothing costs nothing. Round trips are counted at the pg client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends, tapPgStatements, type FreshDatabase } from '@rigging/testkit';
import { openDatabase, sql, type Database } from '../src/index.js';
import { recordingLogger } from './recording-logger.js';

const [backend] = await sqlBackends('sql_pg_opening', ['postgres']);

describe.skipIf(!backend!.available)('BEGIN sent with the first statement (PostgreSQL)', () => {
  let fresh: FreshDatabase;
  let database: Database;
  const warnings: string[] = [];
  /** What each round trip carried: `begin+insert` for a statement sent with a held BEGIN. */
  const trips: string[] = [];
  let restore: () => void;

  beforeAll(async () => {
    fresh = await backend!.create();
    // One connection: the round trips below are all on it, and so are its named statements.
    database = await openDatabase(fresh.url, {
      poolSize: 1,
      logger: recordingLogger('warn', warnings),
    });
    await sql`create table kv (id integer primary key, v text)`.execute(database.db);
    restore = tapPgStatements((_client, text, opening) => {
      const word = text.trim().split(/\s+/)[0]!.toLowerCase();
      trips.push(opening ? `${opening.split(' ')[0]!.toLowerCase()}+${word}` : word);
    });
  });
  afterAll(async () => {
    restore?.();
    await database?.close();
    await fresh?.drop();
  });

  /** The round trips `run` makes. */
  async function tripsOf(run: () => Promise<unknown>): Promise<string[]> {
    trips.length = 0;
    await run();
    return [...trips];
  }
  const txid = (db: Database['db'], tag: number) =>
    sql<{ x: string }>`select txid_current()::text as x, ${tag}::int as tag`
      .execute(db)
      .then((r) => r.rows[0]!.x);

  it('runs the first statement in the transaction BEGIN opened, in one round trip', async () => {
    for (let round = 0; round < 3; round++) {
      // The same texts three times: unnamed, then named and parsed, then named (see naming).
      let ids: string[] = [];
      const sent = await tripsOf(async () => {
        ids = await database.transaction(async (trx) => [await txid(trx, 1), await txid(trx, 2)]);
      });
      expect(sent).toEqual(['begin+select', 'select', 'commit']);
      expect(ids[0]).toBe(ids[1]);
    }
    expect(warnings).toEqual([]);
  });

  it('a failing first statement rolls the transaction back and leaves the connection usable', async () => {
    await database.db
      .insertInto('kv' as never)
      .values({ id: 1, v: 'a' } as never)
      .execute();
    const insert = (db: Database['db'], id: number) =>
      db
        .insertInto('kv' as never)
        .values({ id, v: 'b' } as never)
        .execute();
    let error: unknown;
    const sent = await tripsOf(async () => {
      error = await database
        .transaction(async (trx) => {
          await insert(trx, 1); // duplicate key
          await insert(trx, 2);
        })
        .catch((e: unknown) => e);
    });
    expect(error).toMatchObject({ code: '23505' });
    expect(sent).toEqual(['begin+insert', 'rollback']);
    // A statement after the failed one, in the same transaction, never runs: id 2 is absent.
    const rows = await sql<{ id: number }>`select id from kv order by id`.execute(database.db);
    expect(rows.rows).toEqual([{ id: 1 }]);
    // The next transaction opens as usual on the same connection.
    expect(await tripsOf(() => database.transaction((trx) => insert(trx, 3)))).toEqual([
      'begin+insert',
      'commit',
    ]);
  });

  it('a thrown callback after the first statement rolls it back', async () => {
    const error = await database
      .transaction(async (trx) => {
        await trx
          .insertInto('kv' as never)
          .values({ id: 9, v: 'x' } as never)
          .execute();
        throw new Error('boom');
      })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ message: 'boom' });
    const rows = await sql`select id from kv where id = ${9}`.execute(database.db);
    expect(rows.rows).toEqual([]);
  });

  it('keeps the isolation level the transaction asked for', async () => {
    const sent = await tripsOf(async () => {
      const level = await database.transaction(
        async (trx) =>
          (
            await sql<{
              l: string;
            }>`select current_setting('transaction_isolation') as l, ${1}::int as one`.execute(trx)
          ).rows[0]!.l,
        { isolation: 'serializable' },
      );
      expect(level).toBe('serializable');
    });
    expect(sent).toEqual(['start+select', 'commit']);
  });

  it('sends nothing for a transaction that sends nothing', async () => {
    expect(await tripsOf(() => database.transaction(async () => 'nothing'))).toEqual([]);
    expect(
      await tripsOf(() => database.transaction(async () => {}, { isolation: 'serializable' })),
    ).toEqual([]);
  });

  it('a first statement without parameters goes after BEGIN, in the same transaction', async () => {
    let ids: string[] = [];
    const sent = await tripsOf(async () => {
      ids = await database.transaction(async (trx) => [
        (await sql<{ x: string }>`select txid_current()::text as x`.execute(trx)).rows[0]!.x,
        await txid(trx, 3),
      ]);
    });
    expect(sent).toEqual(['begin', 'select', 'select', 'commit']);
    expect(ids[0]).toBe(ids[1]);
  });

  it('a named statement whose first Parse fails with BEGIN is parsed again at its next use', async () => {
    // Seen once outside a transaction (unnamed), so that its next use names it.
    const read = (db: Database['db']) =>
      sql<{ n: number }>`select count(*)::int as n from gone where id > ${0}`.execute(db);
    await sql`create table gone (id integer)`.execute(database.db);
    await read(database.db);
    await sql`drop table gone`.execute(database.db);
    // Its first named use rides with BEGIN and fails at Parse: the table is gone.
    const error = await database.transaction((trx) => read(trx)).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: '42P01' });
    // The table back, the statement is parsed again under its name (had pg marked it parsed
    // at BEGIN's ParseComplete, it would be bound unparsed: 26000, and naming would stop).
    await sql`create table gone (id integer)`.execute(database.db);
    for (let i = 0; i < 2; i++) {
      const { rows } = await database.transaction((trx) => read(trx));
      expect(rows).toEqual([{ n: 0 }]);
    }
    const names = await sql<{ statement: string }>`
      select statement from pg_prepared_statements where name like 'rigging_%'`.execute(
      database.db,
    );
    expect(names.rows.map((r) => r.statement)).toContain(
      'select count(*)::int as n from gone where id > $1',
    );
    expect(warnings).toEqual([]);
  });

  it('a lost named statement that rode with BEGIN fails its transaction retryably', async () => {
    const lost: string[] = [];
    const other = await openDatabase(fresh.url, {
      poolSize: 1,
      logger: recordingLogger('warn', lost),
    });
    try {
      const byId = (db: Database['db'], id: number) =>
        db
          .selectFrom('kv' as never)
          .select('v' as never)
          .where('id' as never, '=', id as never)
          .executeTakeFirst();
      await byId(other.db, 1);
      await byId(other.db, 1); // named and prepared now
      await sql`deallocate all`.execute(other.db);
      let attempts = 0;
      const row = await other.transaction(async (trx) => {
        attempts++;
        return byId(trx, 1);
      });
      // The first attempt's statement was refused (26000) in the transaction BEGIN opened: not
      // run again unnamed in the aborted transaction, but retried as a whole.
      expect({ row, attempts, lost: lost.length }).toEqual({
        row: { v: 'a' },
        attempts: 2,
        lost: 1,
      });
    } finally {
      await other.close();
    }
  });
});
