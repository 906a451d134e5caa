import { expectTypeOf, test } from 'vitest';
import {
  openDatabase,
  SqlError,
  type Database,
  type Generated,
  type Kysely,
  type Migration,
  type Session,
  type SqlErrorCode,
  withCommit,
} from '../src/index.js';

interface Tables {
  t_item: { id: Generated<number>; name: string };
}

test('openDatabase carries the table interface', () => {
  expectTypeOf(openDatabase<Tables>).returns.resolves.toEqualTypeOf<Database<Tables>>();
  expectTypeOf<Database<Tables>['db']>().toEqualTypeOf<Kysely<Tables>>();
  expectTypeOf<Database>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<Session>().toMatchTypeOf<AsyncDisposable>();
});

test('transaction returns what the callback returns', () => {
  const database = {} as Database<Tables>;
  expectTypeOf(database.transaction(async () => 42)).resolves.toEqualTypeOf<number>();
  expectTypeOf(database.transaction<string>)
    .parameter(1)
    .toMatchTypeOf<
      | {
          isolation?:
            'serializable' | 'read committed' | 'repeatable read' | 'read uncommitted' | 'snapshot';
          retries?: number;
        }
      | undefined
    >();
});

test('transaction resolves with the value of withCommit, not the wrapper', () => {
  const database = {} as Database<Tables>;
  expectTypeOf(
    database.transaction(async (trx) => withCommit(trx.deleteFrom('t_item'), 'done' as const)),
  ).resolves.toEqualTypeOf<'done'>();
  // A body that has a last statement on one path only resolves with the value either way.
  expectTypeOf(
    database.transaction(async (trx) =>
      Math.random() < 0.5 ? withCommit(trx.deleteFrom('t_item'), 1) : 2,
    ),
  ).resolves.toEqualTypeOf<number>();
  // A generic wrapper keeps its own type.
  const wrap = <T>(fn: (trx: Kysely<Tables>) => Promise<T>): Promise<T> => database.transaction(fn);
  expectTypeOf(wrap(async () => 1)).resolves.toEqualTypeOf<number>();
});

test('migrations and errors', () => {
  expectTypeOf<Migration['up']>().parameter(1).toEqualTypeOf<{
    dialect: 'sqlite' | 'postgres' | 'mysql';
  }>();
  expectTypeOf<SqlError['code']>().toEqualTypeOf<SqlErrorCode>();
  expectTypeOf<'sql.driver_missing'>().toMatchTypeOf<SqlErrorCode>();
});
