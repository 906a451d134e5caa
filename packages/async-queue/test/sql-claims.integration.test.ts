// The SQL backend's claims, called as the queue calls them, on a manual clock: one running op per
// key, keys in turn, up to the limit; a fencing token one above the last per claim; an expired
// lease re-claimed (the stale claim refused), failed as poison after too many expiries; a success,
// or a failure that does not stop the key, moves only its own key on; a lease kept by heartbeats
// only while its claim holds; a key that counts an op deleted by hand is set idle instead of
// stalling the claims.
import { manualClock, silentLogger, type SerializedError } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Claim, QueueBackend } from '../src/backend.js';
import { sqlBackend } from '../src/sql.js';
import { KEYS, OPS } from '../src/sql/names.js';

const backends = await sqlBackends('async_queue_claims', ['sqlite-memory', 'postgres', 'mysql']);

const LEASE = 1_000;
const broken: SerializedError = { name: 'Error', message: 'broken' };
const payloads = (claims: Claim[]) => claims.map((c) => [c.op.key, c.op.payload]);

for (const b of backends) {
  describe.skipIf(!b.available)(`SQL claims on ${b.kind}`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let n = 0;
    const opened: QueueBackend[] = [];
    beforeAll(async () => {
      fresh = await b.create();
      database = await openDatabase(fresh.url);
    }, 60_000);
    afterAll(async () => {
      await Promise.allSettled(opened.map((backend) => backend.close()));
      await database?.close();
      await fresh?.drop();
    }, 60_000);

    /** A fresh queue's backend on a manual clock, and its claim as the queue calls it. */
    async function queueAt(start = 1_000_000, maxLeaseExpiries = 3) {
      const clock = manualClock(start);
      const name = `claims${++n}`;
      const backend = sqlBackend(database, { name, pollMs: 50 });
      opened.push(backend);
      await backend.attach({ clock, logger: silentLogger, wake: () => {}, settled: () => {} });
      const claimed = (limit = 10, key?: string, workerId = 'w') =>
        backend.claim({
          limit,
          key,
          leaseMs: LEASE,
          workerId,
          maxLeaseExpiries,
          stopOnPoison: true,
        });
      const claim = async (limit = 10, key?: string, workerId = 'w') =>
        (await claimed(limit, key, workerId)).claims;
      const enqueue = async (key: string, payload: number) =>
        (await backend.enqueue({ key, type: 'run', payload })).op.id;
      /** The key's row as the claims read it: its state and how many queued ops it counts. */
      const keyRow = async (key: string) => {
        const k = await database.db
          .selectFrom(KEYS)
          .select(['state', 'pending'])
          .where('queue', '=', name)
          .where('op_key', '=', key)
          .executeTakeFirstOrThrow();
        return { state: k.state as string, pending: Number(k.pending) };
      };
      return { backend, clock, claim, claimed, enqueue, keyRow };
    }

    it('one head op per key, the key that waited longest first, up to the limit', async () => {
      const { backend, clock, claim, enqueue } = await queueAt();
      await enqueue('c', 1);
      await clock.advance(1);
      await enqueue('a', 2);
      await enqueue('a', 3);
      await clock.advance(1);
      await enqueue('b', 4);
      await clock.advance(1);
      const first = await claim(2);
      expect(payloads(first)).toEqual([
        ['c', 1],
        ['a', 2],
      ]);
      for (const c of first) {
        expect(c.op).toMatchObject({ status: 'running', attempts: 1 });
        expect(c.token).toBe(1);
      }
      expect(payloads(await claim(10))).toEqual([['b', 4]]);
      // 'a' runs op 2: its next op waits for it.
      expect(await claim(10)).toEqual([]);
      expect(await backend.keyStatus('a')).toBe('run-in-progress');
      expect(await backend.succeed(first[1]!, 'ok')).toBeDefined();
      const [next] = await claim(10);
      expect(payloads([next!])).toEqual([['a', 3]]);
      expect(next!.token).toBe(2);
      expect(await backend.succeed(next!, 'ok')).toBeDefined();
      expect(await backend.keyStatus('a')).toBe('idle');
      expect(await claim(10)).toEqual([]);
    });

    it("a key's own claim takes that key's head op only, and nothing while the key runs", async () => {
      const { backend, claim, enqueue } = await queueAt();
      await enqueue('b', 1);
      await enqueue('a', 2);
      await enqueue('a', 3);
      expect(await claim(1, 'c')).toEqual([]);
      const [own] = await claim(1, 'a');
      expect(payloads([own!])).toEqual([['a', 2]]);
      expect(own!.op).toMatchObject({ status: 'running', attempts: 1 });
      expect(await claim(1, 'a')).toEqual([]);
      expect(payloads(await claim(10))).toEqual([['b', 1]]);
      await backend.succeed(own!, 'ok');
      expect(payloads(await claim(1, 'a'))).toEqual([['a', 3]]);
    });

    it('an op given back or failed for later is not claimed before its time, and is then, with a higher token', async () => {
      const { backend, clock, claim, enqueue } = await queueAt(1_000_000);
      await enqueue('a', 1);
      await enqueue('b', 2);
      const [a] = await claim(1, 'a');
      expect(await backend.release(a!, { retryAt: 1_000_500 })).toBe(true);
      const others = await claim(10);
      expect(payloads(others)).toEqual([['b', 2]]);
      await backend.succeed(others[0]!, 'ok');
      await clock.advance(499);
      expect(await claim(10)).toEqual([]);
      await clock.advance(1);
      const [again] = await claim(10);
      expect(again!.op).toMatchObject({ key: 'a', payload: 1, attempts: 1 });
      expect(again!.token).toBeGreaterThan(a!.token);
      await backend.fail(again!, broken, { retryAt: 1_002_000 });
      expect(await claim(10)).toEqual([]);
      await clock.advance(1_500);
      const [third] = await claim(10);
      expect(third!.op).toMatchObject({ payload: 1, attempts: 2 });
      expect(third!.token).toBeGreaterThan(again!.token);
    });

    it('a claim that comes up short tells the next due time as nextDueAt reads it (PostgreSQL: from the same statement)', async () => {
      const { backend, clock, claim, claimed, enqueue } = await queueAt(1_000_000);
      const pg = b.kind === 'postgres';
      await enqueue('a', 1);
      await enqueue('b', 2);
      const [a] = (await claimed(1, 'a')).claims;
      expect(await backend.release(a!, { retryAt: 1_000_700 })).toBe(true);
      // Not short (one key asked, one taken): no due time read.
      const full = await claimed(1);
      expect(payloads(full.claims)).toEqual([['b', 2]]);
      expect(full.due).toBeUndefined();
      // Short: 'a' is due at 1_000_700, 'b' runs.
      const short = await claimed(10);
      expect(short.claims).toEqual([]);
      expect(await backend.nextDueAt()).toBe(1_000_700);
      if (pg) expect(short.due).toBe(1_000_700);
      else expect([undefined, 1_000_700]).toContain(short.due);
      await backend.succeed(full.claims[0]!, 'ok');
      await clock.advance(700);
      expect(payloads(await claim(10))).toEqual([['a', 1]]);
      // Short again, and nothing is due later.
      const none = await claimed(10);
      expect(none.claims).toEqual([]);
      expect(await backend.nextDueAt()).toBeUndefined();
      if (pg) expect(none.due).toBeNull();
      else expect([undefined, null]).toContain(none.due);
    });

    it('an expired lease is re-claimed with the next token and one more attempt; the stale claim is refused', async () => {
      const { backend, clock, claim, enqueue } = await queueAt();
      const id = await enqueue('k', 1);
      await enqueue('k', 2);
      const [first] = await claim(10, undefined, 'dead');
      await clock.advance(LEASE - 100);
      // Not expired yet: nothing to claim, the key keeps its claim.
      expect(await claim(10)).toEqual([]);
      // Expired leases are looked for at most every pollMs (50 ms here).
      await clock.advance(101);
      const [second] = await claim(10, undefined, 'alive');
      expect(second!.op).toMatchObject({ id, key: 'k', payload: 1, attempts: 2 });
      expect(second!.token).toBe(first!.token + 1);
      expect(await claim(10)).toEqual([]);
      // The new claim has a whole lease of its own: not claimable again before it ends.
      await clock.advance(LEASE - 100);
      expect(await claim(10)).toEqual([]);
      // The first worker's late completion carries the old token.
      expect(await backend.succeed(first!, 'late')).toBeUndefined();
      expect(await backend.release(first!)).toBe(false);
      expect(await backend.succeed(second!, 'done')).toBeDefined();
      expect(await backend.get(id)).toMatchObject({ status: 'succeeded', result: 'done' });
      const [after] = await claim(10);
      expect(after!.op.payload).toBe(2);
      expect(after!.token).toBe(second!.token + 1);
    });

    it("a success moves only its own key on: another key's running op keeps its claim", async () => {
      const { backend, claim, enqueue, keyRow } = await queueAt();
      await enqueue('a', 1);
      await enqueue('a', 2);
      await enqueue('b', 3);
      const [a, b] = await claim(10);
      expect(payloads([a!, b!])).toEqual([
        ['a', 1],
        ['b', 3],
      ]);
      expect(await backend.succeed(a!, 'done a')).toBeDefined();
      expect(await keyRow('a')).toEqual({ state: 'ready', pending: 1 });
      expect(await keyRow('b')).toEqual({ state: 'running', pending: 0 });
      expect(await backend.succeed(b!, 'done b')).toBeDefined();
      expect(await keyRow('b')).toEqual({ state: 'idle', pending: 0 });
      const [next] = await claim(10);
      expect(payloads([next!])).toEqual([['a', 2]]);
    });

    it('an op failed for good without stopping its key moves only that key on', async () => {
      const { backend, claim, enqueue, keyRow } = await queueAt();
      const failed = await enqueue('a', 1);
      await enqueue('a', 2);
      await enqueue('b', 3);
      const [a, b] = await claim(10);
      expect(await backend.fail(a!, broken, { stop: false })).toMatchObject({ blocked: false });
      expect(await backend.get(failed)).toMatchObject({ status: 'failed', error: broken });
      expect(await keyRow('a')).toEqual({ state: 'ready', pending: 1 });
      expect(await keyRow('b')).toEqual({ state: 'running', pending: 0 });
      expect(payloads(await claim(10))).toEqual([['a', 2]]);
      expect(await backend.succeed(b!, 'done b')).toBeDefined();
    });

    it('expired leases are claimed first and count against the limit', async () => {
      const { clock, claim, enqueue } = await queueAt();
      await enqueue('x', 1);
      const [expired] = await claim(1);
      await clock.advance(1);
      await enqueue('y', 2);
      await enqueue('z', 3);
      await clock.advance(LEASE + 1);
      const claims = await claim(2);
      expect(payloads(claims)).toEqual([
        ['x', 1],
        ['y', 2],
      ]);
      expect(claims[0]!.token).toBe(expired!.token + 1);
      expect(payloads(await claim(2))).toEqual([['z', 3]]);
    });

    it('an op whose lease expires maxLeaseExpiries times fails as poison: its key is blocked, the ops after it cancelled', async () => {
      const { backend, clock, claim, claimed, enqueue } = await queueAt(1_000_000, 2);
      const id = await enqueue('p', 1);
      const after = await enqueue('p', 2);
      const [first] = await claim(10);
      await clock.advance(LEASE + 1);
      const second = await claimed(10);
      expect(second.poisoned).toEqual([]);
      expect(second.claims[0]!.op).toMatchObject({ id, attempts: 2 });
      await clock.advance(LEASE + 1);
      const third = await claimed(10);
      expect(third.claims).toEqual([]);
      expect(third.poisoned).toHaveLength(1);
      expect(await backend.get(id)).toMatchObject({
        status: 'failed',
        error: { code: 'async-queue.poison' },
      });
      expect((await backend.get(after))?.status).toBe('cancelled');
      expect(await backend.keyStatus('p')).toBe('blocked');
      // Neither claim may complete the op now.
      expect(await backend.succeed(first!, 'late')).toBeUndefined();
      expect(await backend.succeed(second.claims[0]!, 'late')).toBeUndefined();
    });

    it('heartbeats keep a lease while its claim holds it; a claim taken over is reported lost', async () => {
      const { backend, clock, claim, enqueue } = await queueAt();
      await enqueue('h', 1);
      await enqueue('i', 2);
      const claims = await claim(10);
      expect(claims).toHaveLength(2);
      await clock.advance(LEASE - 100);
      expect([...(await backend.heartbeat(claims, LEASE))]).toEqual([]);
      await clock.advance(LEASE - 100);
      // Past the first lease, within the extended one: still held.
      expect(await claim(10)).toEqual([]);
      // Only 'h' keeps beating.
      expect([...(await backend.heartbeat([claims[0]!], LEASE))]).toEqual([]);
      await clock.advance(LEASE - 100);
      const [taken] = await claim(10);
      expect(taken!.op.key).toBe('i');
      const lost = await backend.heartbeat(claims, LEASE);
      expect([...lost]).toEqual([claims[1]]);
      expect(await backend.succeed(claims[0]!, 'ok')).toBeDefined();
    });

    it('a claim tells whether a caller waits for the outcome, however it was claimed', async () => {
      const { backend, clock, claim } = await queueAt();
      const enqueue = (key: string, waited: boolean) =>
        backend.enqueue({ key, type: 'run', payload: key, waited });
      await enqueue('called', true);
      await enqueue('cast', false);
      await enqueue('own', true);
      const announced = (claims: Claim[]) =>
        claims
          .map((c) => [c.op.key, c.announce])
          .sort((x, y) => String(x[0]).localeCompare(String(y[0])));
      expect(announced(await claim(1, 'own'))).toEqual([['own', true]]);
      expect(announced(await claim(10))).toEqual([
        ['called', true],
        ['cast', false],
      ]);
      await clock.advance(LEASE + 1);
      expect(announced(await claim(10))).toEqual([
        ['called', true],
        ['cast', false],
        ['own', true],
      ]);
    });

    // The rows an operator leaves by deleting a queued op by hand (a payload no worker can read
    // any more, say) without touching its key: the key is `ready` and counts an op that is not
    // there. No call of the backend leaves that state (each changes an op and its key's count in
    // one transaction; `prune` deletes finished ops only; `discard` zeroes the count with the ops
    // it cancels), so the test deletes the row itself. Without recovery the claim would find no
    // head op for a key it picks first at every look, and fail or stall every worker.
    it('a key counting a queued op deleted by hand is set idle by the claim that finds it empty; the other keys and later ops are claimed', async () => {
      const { backend, claim, enqueue, keyRow } = await queueAt();
      const deleteOp = (id: string) => database.db.deleteFrom(OPS).where('id', '=', id).execute();
      await deleteOp(await enqueue('gone', 1));
      await enqueue('other', 2);
      expect(await keyRow('gone')).toEqual({ state: 'ready', pending: 1 });
      // The claim transaction (PostgreSQL too: expired leases are due a look at its first claim).
      expect(payloads(await claim(10))).toEqual([['other', 2]]);
      expect(await keyRow('gone')).toEqual({ state: 'idle', pending: 0 });
      // Again, now through PostgreSQL's single-statement claim (no look at expired leases due),
      // whose key without a head op is handed to the claim transaction.
      await deleteOp(await enqueue('gone', 3));
      expect(await claim(10)).toEqual([]);
      expect(await keyRow('gone')).toEqual({ state: 'idle', pending: 0 });
      // Counted from zero again: the next op is claimed, and once it is done the key is idle.
      await enqueue('gone', 4);
      const [next] = await claim(10);
      expect(payloads([next!])).toEqual([['gone', 4]]);
      expect(await backend.succeed(next!, 'ok')).toBeDefined();
      expect(await keyRow('gone')).toEqual({ state: 'idle', pending: 0 });
      expect(await claim(10)).toEqual([]);
    });
  });
}
