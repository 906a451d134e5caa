import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { REDIS_URL, service, spawnNode } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocksError } from '../src/index.js';
import { redisLockProvider } from '../src/redis.js';
import { conformance } from './conformance.js';

const worker = fileURLToPath(new URL('./fixtures/redis-worker.ts', import.meta.url));
const status = await service('redis');
// a prefix of its own per run of this file: parallel runs and other suites never share keys
const PREFIX = `rigging:test:locks:${process.pid}:${randomBytes(4).toString('hex')}:`;

describe.skipIf(!status.available)('redis', () => {
  let c1: Redis;
  let c2: Redis;
  beforeAll(() => {
    c1 = new Redis(REDIS_URL);
    c2 = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    const keys = await c1.keys(`${PREFIX}*`);
    if (keys.length > 0) await c1.del(...keys);
    c1.disconnect();
    c2.disconnect();
  });

  conformance('redis', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX, ttlMs: 2000 });
    const b = redisLockProvider(c2, { prefix: PREFIX, ttlMs: 2000 });
    const keysOf = (key: string) => {
      const id = createHash('sha256').update(key).digest('hex');
      return ['x', 's', 't', 'i'].map((k) => `${PREFIX}{${id}}:${k}`);
    };
    return {
      pair: async () => [a, b],
      // the lease expired in Redis (a long pause, a failover): the next renewal finds out
      lose: async (lease) => void (await c1.del(keysOf(lease.key)[0]!)),
      snapshot: async (key) => Promise.all(keysOf(key).map((k) => c1.dump(k))),
      close: async () => {
        await a.close();
        await b.close();
      },
    };
  });

  it('rejects a client without evalsha and bad options, naming the value', () => {
    expect(() => redisLockProvider({} as never)).toThrow(TypeError);
    expect(() => redisLockProvider(c1, { ttlMs: 0 })).toThrow(/ttlMs.*0/);
    expect(() => redisLockProvider(c1, { prefix: 7 as never })).toThrow(/prefix.*7/);
  });

  it('renews held leases past the TTL', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX, ttlMs: 300 });
    const b = redisLockProvider(c2, { prefix: PREFIX, ttlMs: 300 });
    const lease = await a.acquire('renew');
    await new Promise((r) => setTimeout(r, 1000));
    expect(lease.lost.aborted).toBe(false);
    expect(await b.tryAcquire('renew')).toBeUndefined();
    await lease.release();
    const next = await b.acquire('renew', { timeoutMs: 5000 });
    expect(next.token).toBeGreaterThan(lease.token);
    await next.release();
    await a.close();
    await b.close();
  });

  it('fires lease.lost when the lease is gone at renewal, and another client acquires', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX, ttlMs: 2000, heartbeatMs: 50 });
    const b = redisLockProvider(c2, { prefix: PREFIX, ttlMs: 2000 });
    const lease = await a.acquire('gone');
    const lost = new Promise<unknown>((r) =>
      lease.lost.addEventListener('abort', () => r(lease.lost.reason), { once: true }),
    );
    // what an expiry during a long pause (or a failover) looks like to the holder
    const id = createHash('sha256').update('gone').digest('hex');
    expect(await c1.del(`${PREFIX}{${id}}:x`)).toBe(1);
    const next = await b.acquire('gone', { timeoutMs: 5000 });
    expect(next.token).toBeGreaterThan(lease.token);
    expect(String(await lost)).toMatch(/lost/);
    await lease.release(); // a no-op after loss
    expect(await a.tryAcquire('gone')).toBeUndefined(); // b still holds it
    await next.release();
    await a.close();
    await b.close();
  });

  it('lets an unrenewed lease expire so that others acquire with a greater token', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX, ttlMs: 200, heartbeatMs: 60_000 });
    const b = redisLockProvider(c2, { prefix: PREFIX, ttlMs: 200 });
    const lease = await a.acquire('ttl');
    const next = await b.acquire('ttl', { timeoutMs: 5000 });
    expect(next.token).toBeGreaterThan(lease.token);
    await next.release();
    await lease.release();
    await a.close();
    await b.close();
  });

  it('tells who holds a lock: pid, host, since, count', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX });
    const b = redisLockProvider(c2, { prefix: PREFIX });
    const before = Date.now();
    const s1 = await a.acquire('who', { mode: 'shared' });
    const s2 = await b.acquire('who', { mode: 'shared' });
    const h = await b.holder('who');
    expect(h).toMatchObject({ mode: 'shared', pid: process.pid, count: 2 });
    expect(h!.since).toBeGreaterThanOrEqual(before);
    await Promise.all([s1.release(), s2.release()]);
    expect(await a.holder('who')).toBeUndefined();
    await a.close();
    await b.close();
  });

  it('close() marks held leases lost and frees them for others', async () => {
    const a = redisLockProvider(c1, { prefix: PREFIX });
    const b = redisLockProvider(c2, { prefix: PREFIX });
    const lease = await a.acquire('closing');
    await a.close();
    expect(lease.lost.aborted).toBe(true);
    const next = await b.tryAcquire('closing');
    expect(next?.token).toBeGreaterThan(lease.token);
    await next?.release();
    await b.close();
    // acquiring after close() fails at once instead of retrying
    const closed = await a.acquire('closing').catch((e: unknown) => e);
    expect(LocksError.hasCode(closed, 'locks.closed')).toBe(true);
  });

  it('counts exactly with 3 processes x 30 iterations', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rigging-locks-redis-'));
    try {
      const counter = join(dir, 'counter');
      writeFileSync(counter, '0');
      const kids = [0, 1, 2].map(() => spawnNode(worker, ['counter', PREFIX, counter, '30']));
      await Promise.all(kids.map((c) => c.waitForLine('done', 90_000)));
      await Promise.all(kids.map((c) => c.exited));
      expect(Number(readFileSync(counter, 'utf8'))).toBe(90);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('hands over within the TTL after the holder is SIGKILLed, with a greater token', async () => {
    const child = spawnNode(worker, ['hold', PREFIX, 'crash']);
    const locks = redisLockProvider(c2, { prefix: PREFIX, pollMaxMs: 50 });
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
      // the child's TTL is 1000 ms; generous bound for a loaded CI machine
      expect(Date.now() - killedAt).toBeLessThan(1000 + 4000);
      expect(lease.token).toBeGreaterThan(token);
      await lease.release();
    } finally {
      child.kill('SIGKILL');
      await locks.close();
    }
  }, 90_000);
});
