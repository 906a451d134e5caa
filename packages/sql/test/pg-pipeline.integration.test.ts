// PostgreSQL: a transaction's BEGIN travels with its first statement, and its COMMIT with the
// statement given to `withCommit` (a round trip fewer for each), and the transaction is the same:
// its statements share one transaction id, a failure of the first or the last statement rolls
// everything back, the isolation level holds, a transaction that sends nothing costs nothing.
// Round trips are counted at the pg client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  recordPgRoundTrips,
  sqlBackends,
  type FreshDatabase,
  type PgRoundTrips,
} from '@rigging/testkit';
import { openDatabase, sendWithCommit, sql, withCommit, type Database } from '../src/index.js';
import { recordingLogger } from './recording-logger.js';

const [backend] = await sqlBackends('sql_pg_opening', ['postgres']);

describe.skipIf(!backend!.available)('BEGIN sent with the first statement (PostgreSQL)', () => {
  let fresh: FreshDatabase;
  let database: Database;
  const warnings: string[] = [];
  /** What each round trip carried: `begin+insert` for a statement sent with a held BEGIN. */
  let trips: PgRoundTrips | undefined;

  beforeAll(async () => {
    fresh = await backend!.create();
    // One connection: the round trips below are all on it, and so are its named statements.
    database = await openDatabase(fresh.url, {
      poolSize: 1,
      logger: recordingLogger('warn', warnings),
    });
    await sql`create table kv (id integer primary key, v text)`.execute(database.db);
    trips = recordPgRoundTrips();
  });
  afterAll(async () => {
    trips?.stop();
    await database?.close();
    await fresh?.drop();
  });

  /** Another database handle on one connection, its warnings logged to `warnings`. */
  const oneConnection = (warnings: string[]) =>
    openDatabase(fresh.url, { poolSize: 1, logger: recordingLogger('warn', warnings) });
  /** The round trips `run` makes. */
  const tripsOf = (run: () => Promise<unknown>) => trips!.of(run);
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
    const other = await oneConnection(lost);
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

  describe('withCommit', () => {
    const put = (db: Database['db'], id: number, v: string) =>
      db.insertInto('kv' as never).values({ id, v } as never);
    const value = async (id: number) =>
      (await sql<{ v: string }>`select v from kv where id = ${id}`.execute(database.db)).rows[0]?.v;

    it('sends the last statement with the COMMIT: two round trips for two statements', async () => {
      for (let round = 0; round < 3; round++) {
        let result: unknown;
        const sent = await tripsOf(async () => {
          result = await database.transaction(async (trx) => {
            await put(trx, 100 + round, 'first').execute();
            return withCommit(put(trx, 200 + round, 'last'), `value ${round}`);
          });
        });
        expect(sent).toEqual(['begin+insert', 'insert+commit']);
        expect(result).toBe(`value ${round}`);
        expect([await value(100 + round), await value(200 + round)]).toEqual(['first', 'last']);
      }
    });

    it('a transaction of that statement alone is one round trip', async () => {
      const sent = await tripsOf(() =>
        database.transaction(async (trx) => withCommit(put(trx, 300, 'alone'), null)),
      );
      expect(sent).toEqual(['begin+insert+commit']);
      expect(await value(300)).toBe('alone');
    });

    it('a failing last statement rolls the whole transaction back', async () => {
      const error = await database
        .transaction(async (trx) => {
          await put(trx, 400, 'first').execute();
          return withCommit(put(trx, 300, 'duplicate'), null);
        })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: '23505' });
      expect(await value(400)).toBeUndefined();
      // A check made in SQL fails the same way: nothing of the transaction is left.
      const checked = await database
        .transaction(async (trx) => {
          await put(trx, 401, 'first').execute();
          return withCommit(
            sql`update kv set v = 'never' where id = ${-1}
              and 1 / (select count(*)::integer from kv where id = ${-1}) = 1`,
            null,
          );
        })
        .catch((e: unknown) => e);
      expect(checked).toMatchObject({ code: '22012' });
      expect(await value(401)).toBeUndefined();
      // The connection is clean afterwards.
      expect(
        await tripsOf(() => database.transaction((trx) => put(trx, 402, 'x').execute())),
      ).toEqual(['begin+insert', 'commit']);
    });

    it('a named last statement the server lost fails the transaction retryably; it runs again', async () => {
      const lost: string[] = [];
      const other = await oneConnection(lost);
      try {
        const bump = () => sql`update kv set v = v || '+' where id = ${300}`;
        const once = () => other.transaction(async () => withCommit(bump(), null));
        await once();
        await once(); // named and prepared now
        await sql`deallocate all`.execute(other.db);
        let attempts = 0;
        await other.transaction(async () => {
          attempts++;
          return withCommit(bump(), null);
        });
        expect({ attempts, lost: lost.length, v: await value(300) }).toEqual({
          attempts: 2,
          lost: 1,
          v: 'alone+++',
        });
      } finally {
        await other.close();
      }
    });

    it('statements given to sendWithCommit travel with it, in order: one round trip', async () => {
      // Three rounds: the held statements unnamed, then named and parsed there, then by name.
      for (let round = 0; round < 3; round++) {
        const id = 500 + 10 * round;
        let result: unknown;
        const sent = await tripsOf(async () => {
          result = await database.transaction(async (trx) => {
            await sendWithCommit(trx, put(trx, id, 'held'));
            await sendWithCommit(trx, sql`update kv set v = v || '+' where id = ${id}`);
            return withCommit(sql`update kv set v = v || '!' where id = ${id}`, round);
          });
        });
        expect(sent).toEqual(['begin+insert+update+update+commit']);
        expect(result).toBe(round);
        expect(await value(id)).toBe('held+!');
      }
      const names = await sql<{ statement: string }>`
        select statement from pg_prepared_statements where name like 'rigging_%'`.execute(
        database.db,
      );
      expect(names.rows.map((r) => r.statement)).toContain(
        `update kv set v = v || '+' where id = $1`,
      );
      expect(warnings).toEqual([]);
    });

    it('a held statement that fails rolls everything back, and the connection goes on', async () => {
      // Fails (division by zero) unless a row `probe` exists.
      const checked = (trx: Database['db'], id: number, probe: number) =>
        sql`update kv set v = 'checked' where id = ${id}
          and 1 / (select count(*)::integer from kv where id = ${probe}) = 1`;
      // Three rounds: the same texts unnamed, then named (parsed in the failing round trip).
      for (let round = 0; round < 3; round++) {
        const id = 600 + round;
        const error = await database
          .transaction(async (trx) => {
            await put(trx, id, 'first').execute();
            await sendWithCommit(trx, checked(trx, id, -1));
            return withCommit(put(trx, id + 50, 'last'), null);
          })
          .catch((e: unknown) => e);
        expect(error).toMatchObject({ code: '22012' });
        expect([await value(id), await value(id + 50)]).toEqual([undefined, undefined]);
        // The same statements again, succeeding: named statements were not left half-known.
        const sent = await tripsOf(() =>
          database.transaction(async (trx) => {
            await put(trx, id, 'first').execute();
            await sendWithCommit(trx, checked(trx, id, 1));
            return withCommit(put(trx, id + 50, 'last'), null);
          }),
        );
        expect(sent).toEqual(['begin+insert', 'update+insert+commit']);
        expect([await value(id), await value(id + 50)]).toEqual(['checked', 'last']);
      }
      expect(warnings).toEqual([]);
    });

    it('statements parsed in a round trip that failed are known parsed, the others not', async () => {
      // A (held) parses and runs, B (held) parses and fails, C (held) and the last statement are
      // never parsed: each first named use is in that one failing round trip.
      const a = (trx: Database['db'], id: number) =>
        sql`insert into kv (id, v) values (${id}, 'a') on conflict (id) do nothing`;
      const b = (trx: Database['db'], probe: number) =>
        sql`update kv set v = v where 1 / (select count(*)::integer from kv where id = ${probe}) = 1`;
      const c = (trx: Database['db'], id: number) =>
        sql`update kv set v = v || 'c' where id = ${id}`;
      const last = (trx: Database['db'], id: number) =>
        sql`insert into kv (id, v) values (${id}, 'last') on conflict (id) do nothing`;
      const tx = (id: number, probe: number) =>
        database.transaction(async (trx) => {
          await sendWithCommit(trx, a(trx, id));
          await sendWithCommit(trx, b(trx, probe));
          await sendWithCommit(trx, c(trx, id));
          return withCommit(last(trx, id + 1), null);
        });
      await tx(800, 1); // seen once: unnamed
      const error = await tx(810, -1).catch((e: unknown) => e); // named: Parse of all three
      expect(error).toMatchObject({ code: '22012' });
      for (let round = 0; round < 2; round++) await tx(820 + 10 * round, 1);
      expect([await value(830), await value(831)]).toEqual(['ac', 'last']);
      const names = await sql<{ statement: string }>`
        select statement from pg_prepared_statements where name like 'rigging_%'`.execute(
        database.db,
      );
      const texts = names.rows.map((r) => r.statement);
      for (const t of [a, b, c, last]) {
        const text = t(database.db, 0).compile(database.db).sql;
        expect(texts.filter((x) => x === text)).toHaveLength(1);
      }
      expect(warnings).toEqual([]);
    });

    it('a statement after the held ones takes them along first, in its round trip', async () => {
      const sent = await tripsOf(() =>
        database.transaction(async (trx) => {
          await sendWithCommit(trx, put(trx, 700, 'held'));
          await sendWithCommit(trx, put(trx, 701, 'held'));
          const seen = await sql<{ n: number }>`
            select count(*)::int as n from kv where id in (${700}, ${701})`.execute(trx);
          expect(seen.rows).toEqual([{ n: 2 }]);
          // Without parameters a statement cannot carry them: they go in a round trip of their own.
          await sendWithCommit(trx, put(trx, 703, 'held'));
          const bare = await sql<{ n: number }>`
            select count(*)::int as n from kv where id between 700 and 703`.execute(trx);
          expect(bare.rows).toEqual([{ n: 3 }]);
          return withCommit(put(trx, 702, 'last'), null);
        }),
      );
      expect(sent).toEqual(['begin+insert+insert+select', 'insert', 'select', 'insert+commit']);
      expect(await Promise.all([700, 701, 702, 703].map(value))).toEqual([
        'held',
        'held',
        'last',
        'held',
      ]);
    });
  });
});
