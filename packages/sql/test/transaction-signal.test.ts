// A transaction's retries under forced conflicts: the signal and close() stop them.
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { watchWaits } from './waits.js';
import { openDatabase, sql, type Database } from '../src/index.js';

/** The error better-sqlite3 throws when another connection holds the write lock. */
const busy = () => Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });

describe('transaction retries', () => {
  let database: Database;
  beforeEach(async () => {
    database = await openDatabase('sqlite::memory:');
    await sql`create table t (id integer)`.execute(database.db);
  });
  afterEach(() => database.close());

  it('an aborted signal rejects with sql.aborted before the first attempt', async () => {
    const reason = new Error('stop');
    let calls = 0;
    const e = await database
      .transaction(
        async () => {
          calls++;
        },
        { signal: AbortSignal.abort(reason) },
      )
      .catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.aborted', cause: reason, details: { attempts: 0 } });
    expect(calls).toBe(0);
  });

  it('a signal aborted during a conflicting attempt stops before the retry wait', async () => {
    const controller = new AbortController();
    let calls = 0;
    const started = performance.now();
    const e = await database
      .transaction(
        async (trx) => {
          calls++;
          await sql`insert into t values (1)`.execute(trx);
          controller.abort(new Error('stop'));
          throw busy();
        },
        { signal: controller.signal, retries: 5 },
      )
      .catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.aborted', details: { attempts: 1 } });
    expect((e as Error).message).toMatch(/after 1 conflicting attempt$/);
    expect(calls).toBe(1);
    expect(performance.now() - started).toBeLessThan(1000);
    const rows = await sql<{ id: number }>`select id from t`.execute(database.db);
    expect(rows.rows).toEqual([]); // the attempt was rolled back
  });

  // After the 7th conflict the wait is 100 to 300 ms (200 ms, jittered by ±50%).
  const seventhWait = (onSeventh: () => void) => {
    let calls = 0;
    const fn = async () => {
      if (++calls === 7) setTimeout(onSeventh, 10);
      throw busy();
    };
    return { fn, calls: () => calls };
  };

  it('a signal aborted during the retry wait rejects at once, with no further attempt', async () => {
    const controller = new AbortController();
    let abortedAt = 0;
    const { fn, calls } = seventhWait(() => {
      abortedAt = performance.now();
      controller.abort(new Error('stop'));
    });
    const watch = watchWaits(50); // the 7th wait is 100 to 300 ms; earlier ones are shorter
    let e: unknown;
    let seventh: { fired: boolean; cleared: boolean } | undefined;
    try {
      e = await database
        .transaction(fn, { signal: controller.signal, retries: 20 })
        .catch((err: unknown) => err);
      seventh = watch.waits.at(-1) && { ...watch.waits.at(-1)! };
    } finally {
      watch.restore();
    }
    // the wait under way when the signal aborted ended because of it, not by running out
    expect(abortedAt).toBeGreaterThan(0);
    expect(seventh).toEqual({ ms: expect.any(Number), fired: false, cleared: true });
    expect(e).toMatchObject({ code: 'sql.aborted', details: { attempts: 7 } });
    expect((e as Error & { cause: Error }).cause.message).toBe('stop');
    await new Promise((r) => setTimeout(r, 350));
    expect(calls()).toBe(7);
  });

  it('close() during the retry wait does not wait it out: the transaction is sql.closed', async () => {
    let closedAt = 0;
    let closing: Promise<void> | undefined;
    const { fn, calls } = seventhWait(() => {
      closedAt = performance.now();
      closing = database.close();
    });
    const watch = watchWaits(50);
    let e: unknown;
    let seventh: { fired: boolean; cleared: boolean } | undefined;
    try {
      e = await database.transaction(fn, { retries: 20 }).catch((err: unknown) => err);
      seventh = watch.waits.at(-1) && { ...watch.waits.at(-1)! };
    } finally {
      watch.restore();
    }
    // the wait under way at close() ended because of it, not by running out
    expect(closedAt).toBeGreaterThan(0);
    expect(seventh).toEqual({ ms: expect.any(Number), fired: false, cleared: true });
    expect(e).toMatchObject({ code: 'sql.closed' });
    await closing;
    await new Promise((r) => setTimeout(r, 350));
    expect(calls()).toBe(7);
  });

  it('a signal that never aborts lets the retries run and leaves no listener behind', async () => {
    const controller = new AbortController();
    let calls = 0;
    const result = await database.transaction(
      async (trx) => {
        if (++calls <= 2) throw busy();
        await sql`insert into t values (2)`.execute(trx);
        return 'done';
      },
      { signal: controller.signal },
    );
    expect(result).toBe('done');
    expect(calls).toBe(3);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    const rows = await sql<{ id: number }>`select id from t`.execute(database.db);
    expect(rows.rows).toEqual([{ id: 2 }]);
  });
});
