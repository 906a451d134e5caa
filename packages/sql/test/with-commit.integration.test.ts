// `withCommit` and `sendWithCommit` on every backend: the transaction's last statements run with
// its commit (on PostgreSQL in the same round trip, see pg-pipeline.integration.test.ts), the
// transaction resolves with the value given, and a failing last statement rolls everything back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlBackends } from '@rigging/testkit';
import { openDatabase, sendWithCommit, sql, withCommit, type Database } from '../src/index.js';

const backends = await sqlBackends('sql_with_commit', ['sqlite-file', 'postgres', 'mysql']);

it('refuses anything but a query', async () => {
  expect(() => withCommit('insert into kv values (1)' as never, null)).toThrow(TypeError);
  await expect(sendWithCommit({} as never, 'insert into kv values (1)' as never)).rejects.toThrow(
    TypeError,
  );
});

for (const backend of backends) {
  describe.skipIf(!backend.available)(`withCommit on ${backend.kind}`, () => {
    let database: Database;
    let drop: () => Promise<void>;
    beforeAll(async () => {
      const fresh = await backend.create();
      drop = () => fresh.drop();
      database = await openDatabase(fresh.url);
      await sql`create table kv (id integer primary key, v varchar(20))`.execute(database.db);
    }, 60_000);
    afterAll(async () => {
      await database?.close();
      await drop?.();
    });
    const put = (db: Database['db'], id: number, v: string) =>
      db.insertInto('kv' as never).values({ id, v } as never);
    const ids = async () =>
      (await sql<{ id: number }>`select id from kv order by id`.execute(database.db)).rows.map(
        (r) => Number(r.id),
      );

    it('commits the last statement with the others and resolves with the value', async () => {
      const result = await database.transaction(async (trx) => {
        await put(trx, 1, 'a').execute();
        return withCommit(put(trx, 2, 'b'), { done: true });
      });
      expect(result).toEqual({ done: true });
      expect(await ids()).toEqual([1, 2]);
    });

    it('a failing last statement rolls the transaction back and rejects with its error', async () => {
      const error = await database
        .transaction(async (trx) => {
          await put(trx, 3, 'c').execute();
          return withCommit(put(trx, 1, 'duplicate'), null);
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect(await ids()).toEqual([1, 2]);
    });

    it('statements sent with the commit commit with the transaction', async () => {
      await database.transaction(async (trx) => {
        await sendWithCommit(trx, put(trx, 4, 'd'));
        await sendWithCommit(trx, put(trx, 5, 'e'));
        return withCommit(put(trx, 6, 'f'), null);
      });
      expect(await ids()).toEqual([1, 2, 4, 5, 6]);
      // Without withCommit: they go with the COMMIT alone.
      await database.transaction(async (trx) => {
        await sendWithCommit(trx, put(trx, 7, 'g'));
      });
      expect(await ids()).toEqual([1, 2, 4, 5, 6, 7]);
    });

    it('a failing statement sent with the commit rolls the transaction back', async () => {
      const error = await database
        .transaction(async (trx) => {
          await put(trx, 8, 'h').execute();
          await sendWithCommit(trx, put(trx, 1, 'duplicate'));
          return withCommit(put(trx, 9, 'i'), null);
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect(await ids()).toEqual([1, 2, 4, 5, 6, 7]);
    });
  });
}
