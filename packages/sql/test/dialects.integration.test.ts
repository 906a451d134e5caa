// Dialect-specific behaviour the conformance suite cannot express once for all backends:
// retries under real conflicts, session loss when the server kills a connection, LISTEN/NOTIFY.
import { fileURLToPath } from 'node:url';
import { deferred, silentLogger, type Logger } from '@rigging/core';
import { freshDatabase, service, spawnNode, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordingLogger } from './recording-logger.js';
import { watchWaits } from './waits.js';
import {
  isConnectionError,
  openDatabase,
  sql,
  type Database,
  type Notification,
  type OpenDatabaseOptions,
  type TransactionOptions,
} from '../src/index.js';

const sqliteWriter = fileURLToPath(new URL('./fixtures/sqlite-writer.ts', import.meta.url));
const pgUp = (await service('postgres')).available;
const mysqlUp = (await service('mysql')).available;

/** Resolves once `n` callers have arrived. */
function barrier(n: number) {
  const all = deferred<void>();
  let count = 0;
  return () => {
    if (++count === n) all.resolve();
    return all.promise;
  };
}

async function waitFor(check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.skipIf(!pgUp)('PostgreSQL', () => {
  let fresh: FreshDatabase;
  let database: Database;
  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'sql_pg');
    database = await openDatabase(fresh.url);
    await sql`create table ledger (v integer not null)`.execute(database.db);
  });
  afterAll(async () => {
    await database?.close();
    await fresh?.drop();
  });

  // Write skew: both read the table, then both insert. Serializable isolation aborts one of them
  // with 40001; the retry re-runs it after the other committed.
  async function writeSkew(options: TransactionOptions, db = database) {
    await sql`delete from ledger`.execute(db.db);
    const bothRead = barrier(2);
    let calls = 0;
    const run = () =>
      db.transaction(
        async (trx) => {
          const first = ++calls <= 2;
          const r = await sql<{ n: string }>`select count(*) as n from ledger`.execute(trx);
          if (first) await bothRead();
          await sql`insert into ledger (v) values (${Number(r.rows[0]!.n) + 1})`.execute(trx);
        },
        { isolation: 'serializable', ...options },
      );
    const results = await Promise.allSettled([run(), run()]);
    return { results, calls };
  }

  it('retries a real serialization failure until both transactions commit', async () => {
    const { results, calls } = await writeSkew({ retries: 5 });
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(calls).toBeGreaterThanOrEqual(3);
    const rows = await sql<{ v: number }>`select v from ledger order by v`.execute(database.db);
    expect(rows.rows.map((r) => r.v)).toEqual([1, 2]);
  });

  it('with retries: 0 the conflict surfaces as sql.transaction_failed', async () => {
    const { results } = await writeSkew({ retries: 0 });
    const failed = results.filter((r) => r.status === 'rejected');
    expect(failed).toHaveLength(1);
    const reason = (failed[0] as PromiseRejectedResult).reason as Error & { cause: unknown };
    expect(reason).toMatchObject({ code: 'sql.transaction_failed' });
    expect(reason.cause).toMatchObject({ code: '40001' });
  });

  it('a signal aborted when a real serialization failure is about to be retried stops it', async () => {
    const controller = new AbortController();
    // The retry is logged right before its wait: abort there, as a caller giving up would.
    const logger: Logger = {
      ...silentLogger,
      debug: (obj: unknown, msg?: unknown) => {
        if (msg === 'retrying transaction') controller.abort(new Error('shutting down'));
      },
      child: () => logger,
    };
    const db = await openDatabase(fresh.url, { logger });
    try {
      const { results, calls } = await writeSkew({ signal: controller.signal }, db);
      expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
      const reason = (results.find((r) => r.status === 'rejected') as PromiseRejectedResult)
        .reason as Error & { cause: Error };
      expect(reason).toMatchObject({ code: 'sql.aborted', details: { attempts: 1 } });
      expect(reason.cause.message).toBe('shutting down');
      expect(calls).toBe(2); // no third attempt
      const rows = await sql<{ v: number }>`select v from ledger`.execute(db.db);
      expect(rows.rows.map((r) => r.v)).toEqual([1]);
    } finally {
      await db.close();
    }
  });

  it('LISTEN through a session delivers NOTIFY payloads', async () => {
    await using session = await database.session();
    const got: Notification[] = [];
    const arrived = deferred<void>();
    const off = session.onNotification((n) => {
      got.push(n);
      if (got.length === 2) arrived.resolve();
    });
    await session.query('listen rigging_test');
    await sql`select pg_notify('rigging_test', 'hello')`.execute(database.db);
    await sql`notify rigging_test`.execute(database.db);
    await arrived.promise;
    expect(got).toEqual([
      { channel: 'rigging_test', payload: 'hello' },
      { channel: 'rigging_test', payload: '' },
    ]);
    off();
  });

  it("a session's lost signal aborts when its backend is terminated", async () => {
    const session = await database.session();
    expect(session.id).toBeTypeOf('number');
    const lost = deferred<unknown>();
    session.lost.addEventListener('abort', () => lost.resolve(session.lost.reason));
    await sql`select pg_terminate_backend(${session.id})`.execute(database.db);
    const reason = await lost.promise;
    expect(reason).toBeInstanceOf(Error);
    await session.closed;
    const e = await session.query('select 1').catch((err: unknown) => err);
    expect(isConnectionError(e), String(e)).toBe(true);
    await session.close(); // still fine after loss
  });

  it('a database that does not exist is sql.unreachable, saying so', async () => {
    const url = new URL(fresh.url);
    url.pathname = '/rg_no_such_database';
    const e = await openDatabase(url.toString()).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.unreachable' });
    expect((e as Error).message).toMatch(/does not exist.*check the URL/);
  });

  it('pooled connections killed by the server are replaced, never crash the process', async () => {
    // Without an 'error' listener on checked-out clients, pg emits an unhandled 'error' and the
    // process dies. Kill the pool's backends while queries are in flight, a few times over.
    const db = await openDatabase(fresh.url, { poolSize: 3 });
    await using killer = await database.session();
    try {
      for (let round = 0; round < 5; round++) {
        const inFlight = [1, 2, 3].map(() =>
          sql`select pg_sleep(0.2)`.execute(db.db).catch((e: unknown) => e),
        );
        await new Promise((r) => setTimeout(r, 50));
        await killer.query(
          `select pg_terminate_backend(pid) from pg_stat_activity
           where datname = current_database() and pid <> pg_backend_pid() and query like '%pg_sleep(0.2)%'`,
        );
        for (const r of await Promise.all(inFlight)) {
          if (r instanceof Error) expect(isConnectionError(r), String(r)).toBe(true);
        }
        // Queries right after a kill may still meet dying connections (at most one failure per
        // killed connection); the pool then replaces them.
        let n: number | undefined;
        for (let attempt = 0; attempt < 10 && n === undefined; attempt++) {
          const r = await sql<{ n: number }>`select 1 as n`.execute(db.db).catch((e: unknown) => {
            expect(isConnectionError(e), String(e)).toBe(true);
          });
          n = r?.rows[0]?.n;
        }
        expect(n).toBe(1);
      }
    } finally {
      await db.close();
    }
  });

  it('overlapping session queries run one at a time, in call order, without pg warnings', async () => {
    await using session = await database.session();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const order: number[] = [];
      await Promise.all(
        [3, 2, 1].map((n) =>
          session
            .query(`select pg_sleep(${n / 100}), ${n} as n`)
            .then((r) => order.push(Number((r.rows[0] as { n: number }).n))),
        ),
      );
      expect(order).toEqual([3, 2, 1]);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((m) => m.includes('already executing a query'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a normal close does not abort lost', async () => {
    const session = await database.session();
    await session.close();
    await session.closed;
    expect(session.lost.aborted).toBe(false);
  });
});

describe.skipIf(!mysqlUp)('MariaDB', () => {
  let fresh: FreshDatabase;
  let database: Database;
  beforeAll(async () => {
    fresh = await freshDatabase('mysql', 'sql_my');
    database = await openDatabase(fresh.url);
    await sql`create table pair (id integer primary key, v integer not null) engine=InnoDB`.execute(
      database.db,
    );
    await sql`insert into pair values (1, 0), (2, 0)`.execute(database.db);
  });
  afterAll(async () => {
    await database?.close();
    await fresh?.drop();
  });

  it('a database that does not exist is sql.unreachable, saying so', async () => {
    const url = new URL(fresh.url);
    url.pathname = '/rg_no_such_database';
    const e = await openDatabase(url.toString()).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.unreachable' });
    expect((e as Error).message).toMatch(/Unknown database.*check the URL/);
  });

  it("a session's lost signal aborts when the server kills the connection", async () => {
    const session = await database.session();
    expect(session.id).toBeTypeOf('number');
    const lost = deferred<unknown>();
    session.lost.addEventListener('abort', () => lost.resolve(session.lost.reason));
    await sql.raw(`kill ${Number(session.id)}`).execute(database.db);
    expect(await lost.promise).toBeInstanceOf(Error);
    await session.closed;
    const e = await session.query('select 1').catch((err: unknown) => err);
    expect(isConnectionError(e)).toBe(true);
    await session.close();
  });

  it('pooled connections killed by the server are replaced, never crash the process', async () => {
    const db = await openDatabase(fresh.url, { poolSize: 3 });
    await using killer = await database.session();
    try {
      for (let round = 0; round < 3; round++) {
        const inFlight = [1, 2, 3].map(() =>
          sql`select sleep(0.2)`.execute(db.db).catch((e: unknown) => e),
        );
        await new Promise((r) => setTimeout(r, 50));
        const victims = await killer.query<{ id: number }>(
          `select id from information_schema.processlist where db = database() and id <> connection_id() and info like 'select sleep(0.2)%'`,
        );
        expect(victims.rows.length).toBeGreaterThan(0);
        for (const { id } of victims.rows) await killer.query(`kill ${Number(id)}`);
        await Promise.all(inFlight);
        let n: number | undefined;
        for (let attempt = 0; attempt < 10 && n === undefined; attempt++) {
          const r = await sql<{ n: number }>`select 1 as n`.execute(db.db).catch((e: unknown) => {
            expect(isConnectionError(e), String(e)).toBe(true);
          });
          n = r?.rows[0]?.n;
        }
        expect(Number(n)).toBe(1);
      }
    } finally {
      await db.close();
    }
  });

  it('retries a real deadlock until both transactions commit', async () => {
    const bothLocked = barrier(2);
    let calls = 0;
    const run = (a: number, b: number) =>
      database.transaction(async (trx) => {
        const first = ++calls <= 2;
        await sql`update pair set v = v + 1 where id = ${a}`.execute(trx);
        if (first) await bothLocked();
        await sql`update pair set v = v + 1 where id = ${b}`.execute(trx);
      });
    const results = await Promise.allSettled([run(1, 2), run(2, 1)]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(calls).toBeGreaterThanOrEqual(3);
    const rows = await sql<{ v: number }>`select v from pair order by id`.execute(database.db);
    expect(rows.rows.map((r) => Number(r.v))).toEqual([2, 2]);
  });
});

describe('SQLite in one process', () => {
  it('transactions of two Database objects on one file queue instead of busy-waiting', async () => {
    const fresh = await freshDatabase('sqlite-file', 'sql_inproc');
    // A tiny busy timeout and no retries: without the in-process queue, b's BEGIN IMMEDIATE
    // would fail with SQLITE_BUSY while a's transaction waits for the event loop.
    const a = await openDatabase(fresh.url, { busyTimeoutMs: 10 });
    const b = await openDatabase(fresh.url, { busyTimeoutMs: 10 });
    try {
      await sql`create table t (id integer)`.execute(a.db);
      const aInside = deferred<void>();
      const first = a.transaction(
        async (trx) => {
          await sql`insert into t values (1)`.execute(trx);
          aInside.resolve();
          await new Promise((r) => setTimeout(r, 100));
        },
        { retries: 0 },
      );
      await aInside.promise;
      const second = b.transaction((trx) => sql`insert into t values (2)`.execute(trx), {
        retries: 0,
      });
      await Promise.all([first, second]);
      const rows = await sql<{ id: number }>`select id from t order by id`.execute(b.db);
      expect(rows.rows.map((r) => r.id)).toEqual([1, 2]);
    } finally {
      await a.close();
      await b.close();
      await fresh.drop();
    }
  });
});

describe('SQLite across processes', () => {
  /** A fresh file whose write lock a child process holds until `release()`. */
  async function whileChildHolds(
    name: string,
    options: OpenDatabaseOptions,
    body: (database: Database, release: () => Promise<void>) => Promise<void>,
  ): Promise<void> {
    const fresh = await freshDatabase('sqlite-file', name);
    const database = await openDatabase(fresh.url, options);
    await sql`create table busy_items (id integer primary key, who text)`.execute(database.db);
    const child = spawnNode(sqliteWriter, [fresh.url]);
    try {
      await child.waitForLine('holding');
      await body(database, async () => {
        child.proc.stdin.write('commit\n');
        expect(await child.exited).toBe(0);
      });
    } finally {
      child.kill();
      await database.close();
      await fresh.drop();
    }
  }

  it(
    'a transaction blocked by another process is retried on SQLITE_BUSY, then commits',
    { timeout: 60_000 },
    async () => {
      const logger = recordingLogger('debug');
      await whileChildHolds(
        'sql_busy',
        { busyTimeoutMs: 50, logger },
        async (database, release) => {
          let calls = 0;
          const tx = database.transaction(
            async (trx) => {
              calls++;
              await sql`insert into busy_items (id, who) values (2, 'parent')`.execute(trx);
            },
            { retries: 100 },
          );
          // The parent's BEGIN IMMEDIATE fails with SQLITE_BUSY after 50 ms, again and again,
          // until the child commits.
          await waitFor(
            () => logger.messages.filter((m) => m === 'retrying transaction').length >= 2,
          );
          await release();
          await tx;
          expect(calls).toBe(1);
          const rows = await sql<{ who: string }>`select who from busy_items order by id`.execute(
            database.db,
          );
          expect(rows.rows.map((r) => r.who)).toEqual(['child', 'parent']);
        },
      );
    },
  );

  it.each(['the signal aborts', 'the database is closed'])(
    'SQLITE_BUSY retries stop at once when %s',
    { timeout: 60_000 },
    async (how) => {
      const logger = recordingLogger('debug');
      const retried = () => logger.messages.filter((m) => m === 'retrying transaction').length;
      const options = { busyTimeoutMs: 50, logger };
      await whileChildHolds('sql_busy_stop', options, async (database, release) => {
        const controller = new AbortController();
        const tx = database
          .transaction(async () => {}, { retries: 100, signal: controller.signal })
          .catch((err: unknown) => err);
        await waitFor(() => retried() >= 2);
        const watch = watchWaits(0);
        let e: unknown;
        let after: { fired: boolean; cleared: boolean }[];
        try {
          if (how === 'the signal aborts') controller.abort(new Error('stop'));
          else await database.close();
          e = await tx;
          after = watch.waits.map((w) => ({ fired: w.fired, cleared: w.cleared }));
        } finally {
          watch.restore();
        }
        // At most the attempt under way finishes: no retry wait starts after the stop (a wait
        // under way then is woken, not waited out)
        expect(after).toEqual([]);
        expect(e).toMatchObject({
          code: how === 'the signal aborts' ? 'sql.aborted' : 'sql.closed',
        });
        const count = retried();
        await new Promise((r) => setTimeout(r, 400));
        expect(retried()).toBe(count);
        await release();
      });
    },
  );

  it('gives up with sql.transaction_failed after the retries', { timeout: 60_000 }, async () => {
    await whileChildHolds('sql_busy2', { busyTimeoutMs: 20 }, async (database, release) => {
      const e = await database
        .transaction(async () => {}, { retries: 2 })
        .catch((err: unknown) => err);
      expect(e).toMatchObject({ code: 'sql.transaction_failed' });
      expect((e as Error).message).toMatch(/after 3 attempts/);
      await release();
    });
  });
});
