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

test('migrations and errors', () => {
  expectTypeOf<Migration['up']>().parameter(1).toEqualTypeOf<{
    dialect: 'sqlite' | 'postgres' | 'mysql';
  }>();
  expectTypeOf<SqlError['code']>().toEqualTypeOf<SqlErrorCode>();
  expectTypeOf<'sql.driver_missing'>().toMatchTypeOf<SqlErrorCode>();
});
