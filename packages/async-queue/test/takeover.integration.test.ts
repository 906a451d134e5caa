// A worker SIGKILLed mid-op: another worker takes its op over as soon as the owner is provably
// gone (its PostgreSQL session ended, its MySQL/MariaDB session's named lock was freed; on
// SQLite, its pid on this host is dead), well before the claim's lease expires.
import { fileURLToPath } from 'node:url';
import { deferred } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, spawnNode, type Child, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const WORKER = fileURLToPath(new URL('./fixtures/takeover-worker.ts', import.meta.url));
const LEASE_MS = 60_000;

const backends = await sqlBackends('async_queue_takeover', ['sqlite-file', 'postgres', 'mysql']);

for (const b of backends) {
  describe.skipIf(!b.available)(`takeover on ${b.kind}`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let child: Child | undefined;
    beforeAll(async () => {
      fresh = await b.create();
      database = await openDatabase(fresh.url);
    }, 60_000);
    afterAll(async () => {
      child?.kill('SIGKILL');
      await child?.exited;
      await database?.close();
      await fresh?.drop();
    }, 60_000);

    it('a SIGKILLed worker’s op is taken over well under the lease; order held', async () => {
      const name = 'takeover';
      const ran: string[] = [];
      const took = deferred<number>();
      const make = (worker: boolean) =>
        createQueue({
          backend: sqlBackend(database, { name, pollMs: 100 }),
          worker,
          concurrency: 2,
          leaseMs: LEASE_MS,
          workerId: 'survivor',
          handlers: {
            hold: (_p: null, ctx) => {
              ran.push(`${ctx.id}:${ctx.attempt}`);
              took.resolve(Date.now());
              return 'done';
            },
          },
        });
      const producer = make(false);
      const first = await producer.cast('k', { type: 'hold', payload: null });
      const second = await producer.cast('k', { type: 'hold', payload: null });
      child = spawnNode(WORKER, [fresh.url, name, String(LEASE_MS)]);
      await child.waitForLine(`claimed ${first}`, 60_000);
      // The survivor runs meanwhile: it must not take the op while its owner lives.
      const survivor = make(true);
      await new Promise((r) => setTimeout(r, 1000));
      expect(ran).toEqual([]);
      expect((await survivor.get(first))?.status).toBe('running');
      const killedAt = Date.now();
      child.kill('SIGKILL');
      await child.exited;
      const takenAt = await took.promise;
      const takeoverMs = takenAt - killedAt;
      console.log(`${b.kind}: SIGKILL -> takeover ${takeoverMs} ms (lease ${LEASE_MS} ms)`);
      expect(takeoverMs).toBeLessThan(LEASE_MS / 4);
      expect(await survivor.wait(first)).toBe('done');
      expect(await survivor.wait(second)).toBe('done');
      expect(ran).toEqual([`${first}:2`, `${second}:1`]);
      await survivor.close();
      await producer.close();
    }, 120_000);
  });
}
