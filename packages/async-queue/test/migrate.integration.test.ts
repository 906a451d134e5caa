import { openDatabase, sql, type Database } from '@rigging/sql';
import { sqlBackends, type SqlBackend } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { migrations, sqlBackend } from '../src/sql.js';
import { MIGRATIONS_0_1, ROWS_0_1, SCHEMA_0_1 } from './fixtures/schema-0.1.0.js';

const backends = await sqlBackends('async_queue_migrate', ['sqlite-file', 'postgres', 'mysql']);

/** Opens a fresh database of `b`'s kind and runs `fn` on it, then drops it. */
async function withDatabase(b: SqlBackend, fn: (database: Database) => Promise<void>) {
  const fresh = await b.create();
  const database = await openDatabase(fresh.url);
  try {
    await fn(database);
  } finally {
    await database.close();
    await fresh.drop();
  }
}

/** Builds 0.1.0's schema and rows, and its record of having migrated them. */
async function create010(database: Database): Promise<void> {
  const { db, dialect } = database;
  for (const statement of SCHEMA_0_1[dialect as keyof typeof SCHEMA_0_1]) {
    await sql.raw(statement).execute(db);
  }
  await db
    .insertInto('rigging_migrations')
    .values(
      MIGRATIONS_0_1.map((name, i) => ({
        namespace: 'async-queue',
        version: i + 1,
        name,
        applied_at: 1_700_000_000_000,
      })),
    )
    .execute();
  await db.insertInto('rigging_queue_ops').values(ROWS_0_1.ops).execute();
  await db.insertInto('rigging_queue_keys').values(ROWS_0_1.keys).execute();
}

/** The names of the tables, indexes, constraints and functions of the package, sorted. */
async function objectNames({ db, dialect }: Database): Promise<string[]> {
  const query =
    dialect === 'sqlite'
      ? sql<{ name: string }>`select name from sqlite_master where name like '%rigging_%queue%'`
      : dialect === 'postgres'
        ? sql<{ name: string }>`
          select relname as name from pg_class
          where relnamespace = current_schema()::regnamespace and relname like 'rigging_%queue%'
          union all select conname from pg_constraint
          where connamespace = current_schema()::regnamespace and conname like 'rigging_%queue%'
          union all select proname from pg_proc
          where pronamespace = current_schema()::regnamespace and proname like 'rigging_%queue%'`
        : sql<{ name: string }>`
          select table_name as name from information_schema.tables
          where table_schema = database() and table_name like 'rigging_%queue%'
          union all select distinct index_name from information_schema.statistics
          where table_schema = database() and index_name like 'rigging_%queue%'`;
  return (await query.execute(db)).rows.map((r) => r.name).sort();
}

/** `rows` by id (or key), with numbers as the fixture has them (drivers may return strings). */
function normalized(rows: Record<string, unknown>[], like: Record<string, unknown>[]) {
  return rows.map((row, i) =>
    Object.fromEntries(
      Object.entries(row).map(([k, v]) => [k, typeof like[i]?.[k] === 'number' ? Number(v) : v]),
    ),
  );
}

for (const b of backends) {
  describe.skipIf(!b.available)(`0.1.0's rigging_queue_* on ${b.kind}`, () => {
    it('are renamed to rigging_async_queue_* in place, as a fresh database names them', async () => {
      let expected: string[] = [];
      await withDatabase(b, async (database) => {
        await database.migrate('async-queue', migrations);
        expected = await objectNames(database);
      });
      expect(expected).toContain('rigging_async_queue_ops');
      expect(expected).toContain('rigging_async_queue_keys');
      expect(expected.filter((name) => name.includes('rigging_queue'))).toEqual([]);
      await withDatabase(b, async (database) => {
        await create010(database);
        expect((await objectNames(database)).every((n) => !n.includes('async'))).toBe(true);
        const result = await database.migrate('async-queue', migrations);
        expect(result.applied).toEqual([
          'rigging-async-queue-prefix',
          'keys-head-seq',
          'pg-partial-op-indexes',
          'pg-succeed-by-primary-key',
          'pg-queued-op-index',
          'pg-ends-channel',
          'op-runs-on-its-key',
          'pg-claimed-rows',
          'pg-set-based-claims',
        ]);
        expect(await objectNames(database)).toEqual(expected);
        // Every row, as it was, but that a running op runs on its key's row: the op's row is
        // queued with the attempt under way uncounted, its worker and start on the key row.
        const stored = (table: string, order: string) =>
          database.db.selectFrom(table).selectAll().orderBy(order).execute();
        const ops = await stored('rigging_async_queue_ops', 'id');
        const running = new Map(
          ROWS_0_1.ops.filter((o) => o.status === 'running').map((o) => [o.id, o]),
        );
        expect(running.size).toBe(1);
        const opsNow = ROWS_0_1.ops.map((o) =>
          running.has(o.id) ? { ...o, status: 'queued', attempts: o.attempts - 1 } : o,
        );
        expect(normalized(ops, opsNow)).toEqual(opsNow);
        // Key rows gain `head_seq`, 0 (a bound below every seq), and the running op's worker
        // and start.
        const keys = await stored('rigging_async_queue_keys', 'op_key');
        const keysNow = ROWS_0_1.keys.map((k) => {
          const o = running.get(k.running_op ?? '');
          return {
            ...k,
            head_seq: 0,
            running_worker: o?.worker ?? null,
            running_since: o?.started_at ?? null,
          };
        });
        expect(normalized(keys, keysNow)).toEqual(keysNow);
        // Read back, the op is running as it was.
        const [op] = [...running.values()];
        const queue = createQueue({
          backend: sqlBackend(database, { name: op!.queue }),
          worker: false,
        });
        expect(await queue.get(op!.id)).toMatchObject({
          status: 'running',
          attempts: op!.attempts,
          startedAt: op!.started_at,
        });
        await queue.close();
      });
    }, 60_000);

    it('every op goes on where 0.1.0 left it', async () => {
      await withDatabase(b, async (database) => {
        await create010(database);
        const ran: string[] = [];
        const queue = createQueue({
          backend: sqlBackend(database, { name: 'legacy', pollMs: 50 }),
          concurrency: 4,
          handlers: {
            record: (p: string) => {
              ran.push(p);
              return p.toUpperCase();
            },
          },
        });
        try {
          expect(await queue.get('a1')).toMatchObject({ status: 'succeeded', result: 'A1' });
          // The idempotency key still finds its op.
          expect(
            await queue.cast('b', { type: 'record', payload: 'again', idempotencyKey: 'idem-b1' }),
          ).toBe('b1');
          // Queued ops run in order; the dead worker's op is claimed again, then the next.
          expect(await queue.wait('b1')).toBe('B1');
          expect(await queue.wait('b2')).toBe('B2');
          expect(await queue.wait('c1')).toBe('C1');
          expect(await queue.wait('c2')).toBe('C2');
          expect(await queue.get('c1')).toMatchObject({ status: 'succeeded', attempts: 2 });
          // The blocked key stays blocked, its failure and cancellation kept, until resumed.
          expect(await queue.inspect('d')).toMatchObject({
            status: 'blocked',
            blockedBy: 'd1',
            held: 1,
            pending: [{ id: 'd3', held: true }],
          });
          expect(await queue.get('d1')).toMatchObject({
            status: 'failed',
            error: { message: 'disk full' },
          });
          expect(await queue.get('d2')).toMatchObject({ status: 'cancelled', cancelledBy: 'd1' });
          expect(await queue.resume('d')).toBe(true);
          expect(await queue.wait('d3')).toBe('D3');
          // A new op continues its key's sequence.
          expect(await queue.call('a', { type: 'record', payload: 'a2' })).toBe('A2');
          const a = await database.db
            .selectFrom('rigging_async_queue_keys')
            .select('next_seq')
            .where('op_key', '=', 'a')
            .executeTakeFirstOrThrow();
          expect(Number(a.next_seq)).toBe(2);
          expect([...ran].sort()).toEqual(['a2', 'b1', 'b2', 'c1', 'c2', 'd3']);
          expect(ran.filter((p) => p.startsWith('b'))).toEqual(['b1', 'b2']);
          expect(ran.filter((p) => p.startsWith('c'))).toEqual(['c1', 'c2']);
        } finally {
          await queue.close();
        }
      });
    }, 60_000);

    it.runIf(b.kind === 'mysql')(
      'carries on after a run that renamed one table only (MySQL commits DDL at once)',
      async () => {
        await withDatabase(b, async (database) => {
          await create010(database);
          await sql
            .raw(
              `alter table rigging_queue_keys rename index rigging_queue_keys_turn_key to rigging_async_queue_keys_turn_key, rename to rigging_async_queue_keys`,
            )
            .execute(database.db);
          await database.migrate('async-queue', migrations);
          expect((await objectNames(database)).filter((n) => n.includes('rigging_queue'))).toEqual(
            [],
          );
          const ops = await database.db
            .selectFrom('rigging_async_queue_ops')
            .select('id')
            .execute();
          expect(ops).toHaveLength(ROWS_0_1.ops.length);
        });
      },
      60_000,
    );
  });
}
