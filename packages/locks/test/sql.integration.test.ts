import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RiggingError, manualClock } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { spawnNode, sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocksError } from '../src/index.js';
import { sqlLockProvider } from '../src/sql.js';
import { conformance } from './conformance.js';

/** Lets I/O callbacks run until `done()` (a renewal's query finishing), for at most 5 s. */
async function until(done: () => boolean): Promise<void> {
  const deadline = performance.now() + 5000;
  do await new Promise((r) => setTimeout(r, 2));
  while (!done() && performance.now() < deadline);
}

const worker = fileURLToPath(new URL('./fixtures/sql-worker.ts', import.meta.url));
const backends = await sqlBackends('locks');

for (const backend of backends) {
  describe.skipIf(!backend.available)(`sql ${backend.kind}`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    beforeAll(async () => {
      fresh = await backend.create();
      database = await openDatabase(fresh.url);
    });
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    });

    conformance(backend.kind, async () => {
      const a = sqlLockProvider(database, { ttlMs: 2000 });
      const b = sqlLockProvider(database, { ttlMs: 2000 });
      return {
        pair: async () => [a, b],
        lose: async (lease) => {
          if (backend.kind === 'postgres' || backend.kind === 'mysql') {
            // the provider's session is killed from outside
            const owner = (await b.holder(lease.key))?.owner ?? '';
            const id = Number(owner.replace(/^\D+/, ''));
            expect(id).toBeGreaterThan(0);
            const kill =
              backend.kind === 'postgres' ? `select pg_terminate_backend(${id})` : `kill ${id}`;
            await sql.raw(kill).execute(database.db);
          } else {
            // the lease row is gone (expired and taken over): the next renewal finds out
            await sql`delete from rigging_locks_leases where lock_key = ${lease.key}`.execute(
              database.db,
            );
          }
        },
        snapshot: async (key) => [
          (
            await sql`select token from rigging_locks_tokens where lock_key = ${key}`.execute(
              database.db,
            )
          ).rows,
          (
            await sql`select lease_id from rigging_locks_leases where lock_key = ${key}`.execute(
              database.db,
            )
          ).rows,
        ],
        close: async () => {
          await a.close();
          await b.close();
        },
      };
    });

    it('close() marks held leases lost and frees them for others', async () => {
      const a = sqlLockProvider(database);
      const b = sqlLockProvider(database);
      const lease = await a.acquire('closing');
      await a.close();
      expect(lease.lost.aborted).toBe(true);
      const next = await b.acquire('closing', { timeoutMs: 5000 });
      expect(next.token).toBeGreaterThan(lease.token);
      await next.release();
      await lease.release(); // no-op
      await b.close();
      // acquiring after close() fails at once instead of retrying
      const closed = await a.acquire('closing').catch((e: unknown) => e);
      expect(LocksError.hasCode(closed, 'locks.closed')).toBe(true);
    });

    it('never lets shared and exclusive holders of two sessions overlap', async () => {
      const a = sqlLockProvider(database, { pollMaxMs: 10 });
      const b = sqlLockProvider(database, { pollMaxMs: 10 });
      let readers = 0;
      let writers = 0;
      let seed = 7; // deterministic mix of modes and hold times
      const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      await Promise.all(
        Array.from({ length: 6 }, async (_, w) => {
          const p = w % 2 ? a : b;
          for (let i = 0; i < 12; i++) {
            const mode = random() < 0.6 ? 'shared' : 'exclusive';
            const lease = await p.acquire('mixed', { mode, timeoutMs: 30_000 });
            if (mode === 'shared') readers++;
            else writers++;
            expect(writers === 0 || (writers === 1 && readers === 0)).toBe(true);
            await new Promise((r) => setTimeout(r, 1 + Math.floor(random() * 3)));
            if (mode === 'shared') readers--;
            else writers--;
            await lease.release();
          }
        }),
      );
      await a.close();
      await b.close();
    }, 90_000);

    if (backend.kind === 'mysql') {
      it('grants shared leases of several sessions at once; a waiting writer is not starved', async () => {
        const a = sqlLockProvider(database);
        const b = sqlLockProvider(database);
        const c = sqlLockProvider(database);
        try {
          const r1 = await b.acquire('rw', { mode: 'shared' });
          const r2 = await c.acquire('rw', { mode: 'shared', timeoutMs: 5000 });
          expect((await a.holder('rw'))?.count).toBe(2);
          const writer = a.acquire('rw', { timeoutMs: 20_000 });
          await new Promise((r) => setTimeout(r, 100)); // the writer holds the gate now
          // new readers wait behind the writer instead of overlapping it forever
          expect(await b.tryAcquire('rw', { mode: 'shared' })).toBeUndefined();
          const late = c.acquire('rw', { mode: 'shared', timeoutMs: 20_000 });
          await r1.release();
          await r2.release();
          const w = await writer;
          expect(w.token).toBeGreaterThan(r2.token);
          expect((await b.holder('rw'))?.mode).toBe('exclusive');
          await w.release();
          const l = await late;
          expect(l.token).toBeGreaterThan(w.token);
          await l.release();
          // a writer that gives up leaves nothing behind
          const r3 = await b.acquire('rw', { mode: 'shared' });
          const gaveUp = await a.acquire('rw', { timeoutMs: 100 }).catch((e: unknown) => e);
          expect(RiggingError.hasCode(gaveUp, 'locks.timeout')).toBe(true);
          expect(await a.tryAcquire('rw')).toBeUndefined();
          const r4 = await c.acquire('rw', { mode: 'shared', timeoutMs: 5000 });
          await Promise.all([r3.release(), r4.release()]);
          const x = await a.tryAcquire('rw');
          expect(x).toBeDefined();
          await x?.release();
        } finally {
          await Promise.all([a.close(), b.close(), c.close()]);
        }
      }, 60_000);
    }

    if (backend.kind !== 'sqlite-memory') {
      it('counts exactly with 3 processes x 30 iterations', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'rigging-locks-sql-'));
        try {
          const counter = join(dir, 'counter');
          writeFileSync(counter, '0');
          const kids = [0, 1, 2].map(() =>
            spawnNode(worker, ['counter', fresh.url, counter, '30']),
          );
          await Promise.all(kids.map((c) => c.waitForLine('done', 90_000)));
          await Promise.all(kids.map((c) => c.exited));
          expect(Number(readFileSync(counter, 'utf8'))).toBe(90);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }, 120_000);

      it('hands over after the holder is SIGKILLed, with a greater token', async () => {
        const child = spawnNode(worker, ['hold', fresh.url, 'crash']);
        const locks = sqlLockProvider(database, { ttlMs: 1000 });
        try {
          const line = await child.waitForLine(/^held /, 60_000);
          const token = BigInt(line.slice(5));
          const h = await locks.holder('crash');
          expect(h?.pid).toBe(child.pid);
          const waiting = locks.acquire('crash', { timeoutMs: 30_000 });
          child.kill('SIGKILL');
          await child.exited;
          const killedAt = Date.now();
          const lease = await waiting;
          // flock-like backends hand over at once; lease tables within TTL + a poll
          expect(Date.now() - killedAt).toBeLessThan(
            backend.kind.startsWith('sqlite') ? 5000 : 3000,
          );
          expect(lease.token).toBeGreaterThan(token);
          await lease.release();
        } finally {
          child.kill('SIGKILL');
          await locks.close();
        }
      }, 90_000);
    }

    if (backend.kind === 'postgres') {
      it('wakes waiters of other sessions by NOTIFY, not by polling', async () => {
        const a = sqlLockProvider(database, { fallbackPollMs: 600_000 });
        const b = sqlLockProvider(database, { fallbackPollMs: 600_000 });
        try {
          for (let i = 0; i < 5; i++) {
            const held = await a.acquire('notify');
            const waiting = b.acquire('notify', { timeoutMs: 10_000 });
            await new Promise((r) => setTimeout(r, 30)); // b has tried, announced itself, and waits
            await held.release();
            const lease = await waiting; // would time out if the wake-up were lost
            await lease.release();
          }
          // an uncontended release sends no NOTIFY; contended ones still wake the waiter
          const s1 = await a.acquire('notify', { mode: 'shared' });
          const s2 = await b.acquire('notify', { mode: 'shared', timeoutMs: 1000 });
          await Promise.all([s1.release(), s2.release()]);
        } finally {
          await a.close();
          await b.close();
        }
      }, 60_000);

      it('moves the token sequence past the server clock after a server restart', async () => {
        const a = sqlLockProvider(database);
        const first = await a.acquire('epoch');
        await first.release();
        await a.close();
        // what a crash looks like to the provider: a different postmaster start time, and a
        // sequence that went back (its last WAL was not flushed)
        await sql`update rigging_locks_pg_epoch set started = 'epoch'`.execute(database.db);
        await sql`select setval('rigging_locks_token_seq', 1)`.execute(database.db);
        const b = sqlLockProvider(database);
        const before = BigInt(Date.now()) * 1000n;
        const next = await b.acquire('epoch');
        expect(next.token).toBeGreaterThan(first.token);
        expect(next.token).toBeGreaterThanOrEqual(before - 5_000_000n); // server clock, µs
        await next.release();
        await b.close();
      }, 60_000);

      it('holder() tells pid, host and since; brief grants write nothing stale', async () => {
        const clock = manualClock(Date.now());
        const a = sqlLockProvider(database, { clock });
        const b = sqlLockProvider(database, { clock });
        try {
          const before = clock.now();
          const lease = await a.acquire('pgholder');
          await clock.advance(100); // past the recording delay
          let h = await b.holder('pgholder');
          for (let i = 0; i < 100 && h?.since !== before; i++) h = await b.holder('pgholder');
          expect(h).toMatchObject({ mode: 'exclusive', pid: process.pid, count: 1, since: before });
          await lease.release();
          expect(await b.holder('pgholder')).toBeUndefined();
          // a later brief grant is not described by the earlier record
          const again = await a.acquire('pgholder');
          const h2 = await b.holder('pgholder');
          expect(h2!.since).toBeGreaterThan(h!.since);
          await again.release();
          const s1 = await a.acquire('pgholder', { mode: 'shared' });
          const s2 = await b.acquire('pgholder', { mode: 'shared', timeoutMs: 5000 });
          expect((await a.holder('pgholder'))?.count).toBe(2);
          expect(s2.token).toBeGreaterThan(s1.token);
          await Promise.all([s1.release(), s2.release()]);
        } finally {
          await a.close();
          await b.close();
        }
      }, 60_000);

      it('fires lease.lost when the session is terminated, and another client acquires', async () => {
        const a = sqlLockProvider(database);
        const b = sqlLockProvider(database);
        try {
          const lease = await a.acquire('pgkill');
          const h = await b.holder('pgkill');
          const backendPid = Number(h?.owner?.replace('backend ', ''));
          expect(backendPid).toBeGreaterThan(0);
          const waiting = b.acquire('pgkill', { timeoutMs: 20_000 });
          const lost = new Promise<unknown>((r) =>
            lease.lost.addEventListener('abort', () => r(lease.lost.reason), { once: true }),
          );
          await database.db.executeQuery({
            sql: 'select pg_terminate_backend($1)',
            parameters: [backendPid],
            query: undefined as never,
            queryId: undefined as never,
          });
          expect(RiggingError.hasCode(await lost, 'locks.lost')).toBe(true);
          const next = await waiting;
          expect(next.token).toBeGreaterThan(lease.token);
          await lease.release(); // a no-op after loss
          await next.release();
          // a fresh session serves later acquires
          const again = await a.acquire('pgkill', { timeoutMs: 10_000 });
          await again.release();
        } finally {
          await a.close();
          await b.close();
        }
      }, 60_000);
    }

    if (backend.kind.startsWith('sqlite')) {
      it('leases expire and renew on the injected clock, with no real waits', async () => {
        const clock = manualClock(Date.now());
        const a = sqlLockProvider(database, { ttlMs: 200, heartbeatMs: 60_000, clock });
        const b = sqlLockProvider(database, { ttlMs: 200, heartbeatMs: 50, clock });
        try {
          const lease = await a.acquire('ttl');
          expect(await b.tryAcquire('ttl')).toBeUndefined();
          await clock.advance(199);
          expect(await b.tryAcquire('ttl')).toBeUndefined();
          await clock.advance(2); // a never renewed: its lease is over
          const next = await b.tryAcquire('ttl');
          expect(next?.token).toBeGreaterThan(lease.token);
          // a's next heartbeat finds its lease gone
          expect(lease.lost.aborted).toBe(false);
          await clock.advance(60_000);
          await until(() => lease.lost.aborted);
          expect(RiggingError.hasCode(lease.lost.reason, 'locks.lost')).toBe(true);
          await lease.release();
          // b renews every 50 ms: still held three TTLs later
          for (let i = 0; i < 12; i++) {
            await clock.advance(50);
            await until(() => true);
          }
          expect(next?.lost.aborted).toBe(false);
          expect(await a.tryAcquire('ttl')).toBeUndefined();
          await next?.release();
        } finally {
          await a.close();
          await b.close();
        }
      });
    }
  });
}
