import { fileURLToPath } from 'node:url';
import { RiggingError, fencingTokenFromJson, fencingTokenToJson } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { spawnNode, sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlFencingGuard, sqlLockProvider, type SqlFencingGuard } from '../src/sql.js';

const worker = fileURLToPath(new URL('./fixtures/sql-worker.ts', import.meta.url));
const backends = await sqlBackends('locks_fence');

/** The code a promise rejects with (fails the test when it resolves). */
async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (RiggingError.isInstance(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

for (const backend of backends) {
  describe.skipIf(!backend.available)(`SqlFencingGuard on ${backend.kind}`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let guard: SqlFencingGuard;
    beforeAll(async () => {
      fresh = await backend.create();
      database = await openDatabase(fresh.url);
      guard = sqlFencingGuard(database);
      await guard.migrate();
      await sql`create table fence_docs (id varchar(64) primary key, body text not null, token bigint not null)`.execute(
        database.db,
      );
    });
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    });

    /** A fenced write of `body` to doc `id` under `token`, as a user writes one. */
    const write = (id: string, body: string, token: bigint) =>
      database.transaction(async (trx) => {
        await guard.check(trx, id, token);
        await sql`update fence_docs set body = ${body}, token = ${token.toString()} where id = ${id}`.execute(
          trx,
        );
      });
    const doc = async (id: string) =>
      (
        await sql<{ body: string }>`select body from fence_docs where id = ${id}`.execute(
          database.db,
        )
      ).rows[0]?.body;

    it('accepts equal and higher tokens, refuses a lower one with locks.stale and rolls back its transaction', async () => {
      await sql`insert into fence_docs (id, body, token) values ('a', 'v0', 0)`.execute(
        database.db,
      );
      await write('a', 'v5', 5n);
      await write('a', 'v5 again', 5n);
      await write('a', 'v9', 9n);
      expect(await guard.highest(database.db, 'a')).toBe(9n);
      // the stale write's own earlier statement in the same transaction is undone too
      const stale = database.transaction(async (trx) => {
        await sql`update fence_docs set body = 'before the check' where id = 'a'`.execute(trx);
        await guard.check(trx, 'a', 8n);
        await sql`update fence_docs set body = 'v8' where id = 'a'`.execute(trx);
      });
      await expect(stale).rejects.toMatchObject({
        code: 'locks.stale',
        details: { resource: 'a', token: '8', highest: '9' },
      });
      expect(await doc('a')).toBe('v9');
      expect(await guard.highest(database.db, 'a')).toBe(9n);
      // resources are independent
      await sql`insert into fence_docs (id, body, token) values ('b', 'v0', 0)`.execute(
        database.db,
      );
      await write('b', 'b1', 1n);
      expect(await guard.highest(database.db, 'b')).toBe(1n);
    });

    it('a token that travelled as JSON fences like the bigint it came from', async () => {
      await sql`insert into fence_docs (id, body, token) values ('j', 'v0', 0)`.execute(
        database.db,
      );
      const payload = JSON.parse(JSON.stringify({ token: fencingTokenToJson(12n) })) as {
        token: unknown;
      };
      await write('j', 'v12', fencingTokenFromJson(payload.token));
      expect(await codeOf(write('j', 'v11', 11n))).toBe('locks.stale');
      expect(await doc('j')).toBe('v12');
    });

    it('a token accepted in a transaction that rolls back is not remembered', async () => {
      await sql`insert into fence_docs (id, body, token) values ('r', 'v0', 0)`.execute(
        database.db,
      );
      await write('r', 'v3', 3n);
      await expect(
        database.transaction(async (trx) => {
          await guard.check(trx, 'r', 7n);
          throw new Error('the write failed');
        }),
      ).rejects.toThrow('the write failed');
      expect(await guard.highest(database.db, 'r')).toBe(3n);
      await write('r', 'v4', 4n);
      expect(await doc('r')).toBe('v4');
    });

    it('refuses bad input before touching the database', async () => {
      const g = sqlFencingGuard(database);
      await database.transaction(async (trx) => {
        await expect(g.check(trx, 'x', 1n)).rejects.toThrow(/migrate\(\)/);
        await expect(guard.check(trx, '', 1n)).rejects.toThrow(TypeError);
        await expect(guard.check(trx, 'x', 1 as unknown as bigint)).rejects.toThrow(TypeError);
        await expect(guard.check(trx, 'x', -1n)).rejects.toThrow(TypeError);
      });
      expect(await guard.highest(database.db, 'x')).toBeUndefined();
      expect(() => sqlFencingGuard({} as Database)).toThrow(TypeError);
    });

    if (backend.kind === 'postgres' || backend.kind === 'mysql') {
      it('a lower token waiting on a higher one in flight is refused once that one commits', async () => {
        await sql`insert into fence_docs (id, body, token) values ('race', 'v0', 0)`.execute(
          database.db,
        );
        let commit!: () => void;
        const committed = new Promise<void>((r) => (commit = r));
        let checked!: () => void;
        const higherChecked = new Promise<void>((r) => (checked = r));
        const higher = database.transaction(async (trx) => {
          await guard.check(trx, 'race', 6n);
          await sql`update fence_docs set body = 'v6' where id = 'race'`.execute(trx);
          checked();
          await committed;
        });
        await higherChecked;
        // queues on the row; its outcome is taken at once (it may settle before `higher` does)
        const lower = codeOf(write('race', 'v5', 5n));
        await new Promise((r) => setTimeout(r, 100));
        commit();
        await higher;
        expect(await lower).toBe('locks.stale');
        expect(await doc('race')).toBe('v6');
      });
    }

    if (backend.kind !== 'sqlite-memory') {
      it('refuses the write of a paused stale holder after another holder wrote with a higher token', async () => {
        const key = 'paused';
        await sql`insert into fence_docs (id, body, token) values (${key}, 'v0', 0)`.execute(
          database.db,
        );
        const child = spawnNode(worker, ['fenced', fresh.url, key]);
        const locks = sqlLockProvider(database, { ttlMs: 1000 });
        try {
          const staleToken = BigInt((await child.waitForLine(/^held /, 60_000)).slice(5));
          // the holder is paused (a GC pause, a stopped VM): it cannot renew or notice anything
          child.kill('SIGSTOP');
          if (backend.kind === 'postgres' || backend.kind === 'mysql') {
            // its session is cut off meanwhile (a partition, a server-side timeout), freeing the lock
            const owner = (await locks.holder(key))?.owner ?? '';
            const id = Number(owner.replace(/^\D+/, ''));
            expect(id).toBeGreaterThan(0);
            const kill =
              backend.kind === 'postgres' ? `select pg_terminate_backend(${id})` : `kill ${id}`;
            await sql.raw(kill).execute(database.db);
          } // SQLite: its lease expires after ttlMs without renewal
          const lease = await locks.acquire(key, { timeoutMs: 30_000 });
          expect(lease.token).toBeGreaterThan(staleToken);
          await write(key, 'written by the new holder', lease.token);

          child.kill('SIGCONT');
          child.proc.stdin.write('write written by the stale holder\n');
          expect(await child.waitForLine(/^(written|refused)/, 30_000)).toBe('refused locks.stale');
          expect(await doc(key)).toBe('written by the new holder');
          expect(await guard.highest(database.db, key)).toBe(lease.token);
          await lease.release();
        } finally {
          child.kill('SIGKILL');
          await child.exited;
          await locks.close();
        }
      }, 90_000);
    }
  });
}
