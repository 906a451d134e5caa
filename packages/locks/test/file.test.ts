import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RiggingError } from '@rigging/core';
import { spawnNode } from '@rigging/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { FileLock, TwoLevelLock, encodeLockKey } from '../src/index.js';

const worker = fileURLToPath(new URL('./fixtures/file-worker.ts', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'rigging-locks-'));
let n = 0;
const freshDir = () => join(root, `d${n++}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('FileLock', () => {
  it('excludes within one process and hands over on release', async () => {
    const locks = new FileLock({ dir: freshDir() });
    const a = await locks.acquire('k');
    expect(await locks.tryAcquire('k')).toBeUndefined();
    const b = locks.acquire('k');
    await a.release();
    const lb = await b;
    expect(lb.token).toBeGreaterThan(a.token);
    await lb.release();
    await lb.release(); // twice is a no-op
    locks.close();
  });

  it('allows many shared holders and excludes exclusive ones', async () => {
    const locks = new FileLock({ dir: freshDir() });
    const s1 = await locks.acquire('k', { mode: 'shared' });
    const s2 = await locks.acquire('k', { mode: 'shared' });
    expect(s2.token).toBeGreaterThan(s1.token);
    expect(await locks.tryAcquire('k')).toBeUndefined();
    const h = await locks.holder('k');
    expect(h).toMatchObject({ mode: 'shared', pid: process.pid, count: 2 });
    await s1.release();
    expect(await locks.tryAcquire('k')).toBeUndefined();
    await s2.release();
    const x = await locks.tryAcquire('k');
    expect(x?.token).toBeGreaterThan(s2.token);
    expect(await locks.holder('k')).toMatchObject({ mode: 'exclusive', pid: process.pid });
    await x?.release();
    expect(await locks.holder('k')).toBeUndefined();
    locks.close();
  });

  it('times out and aborts with locks.* codes, leaving no waiter', async () => {
    const locks = new FileLock({ dir: freshDir() });
    const a = await locks.acquire('k');
    const t = await locks.acquire('k', { timeoutMs: 20 }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(t, 'locks.timeout')).toBe(true);
    expect(String((t as Error).message)).toMatch(/held exclusive by pid/);
    const ac = new AbortController();
    const p = locks.acquire('k', { signal: ac.signal }).catch((e: unknown) => e);
    ac.abort(new Error('stop'));
    const e = await p;
    expect(RiggingError.hasCode(e, 'locks.aborted')).toBe(true);
    await a.release();
    const b = await locks.acquire('k', { timeoutMs: 1000 });
    await b.release();
    locks.close();
  });

  it('encodes keys so none escapes the directory, and rejects invalid keys and modes', async () => {
    const dir = freshDir();
    const locks = new FileLock({ dir });
    for (const key of ['../x', '..', '.', 'a/b', '/etc/passwd', 'ü~*', 'x'.repeat(1000)]) {
      const l = await locks.acquire(key);
      await l.release();
      expect(encodeLockKey(key)).not.toMatch(/[/.]/);
    }
    expect(readdirSync(dir)).toHaveLength(7);
    await expect(locks.acquire('')).rejects.toThrow(TypeError);
    await expect(locks.acquire('a\0b')).rejects.toThrow(/a\\u0000b/);
    await expect(locks.acquire('\ud800')).rejects.toThrow(TypeError);
    await expect(locks.acquire('k', { mode: 'read' as never })).rejects.toThrow(/"read"/);
    locks.close();
  });

  it('rejects bad options with a TypeError naming the option and the value', () => {
    const dir = freshDir();
    expect(() => new FileLock({ dir, pollMinMs: 0 })).toThrow(/FileLock: pollMinMs .* got 0/);
    expect(() => new FileLock({ dir, pollMaxMs: Infinity })).toThrow(/pollMaxMs.*Infinity/);
    expect(() => new FileLock({ dir, checkIntervalMs: -1 })).toThrow(/checkIntervalMs.*-1/);
    expect(() => new FileLock({ dir, maxIdleFds: 1.5 })).toThrow(/maxIdleFds must be an integer/);
    expect(() => new TwoLevelLock({ dir, preference: 'lifo' as never })).toThrow(/"lifo"/);
  });

  it('fires lease.lost when the lock file is replaced, and never reuses a replaced file', async () => {
    const dir = freshDir();
    const locks = new FileLock({ dir, checkIntervalMs: 10 });
    const a = await locks.acquire('k');
    const path = locks.pathOf('k');
    writeFileSync(path + '.new', '');
    renameSync(path + '.new', path);
    await new Promise<void>((r) => a.lost.addEventListener('abort', () => r(), { once: true }));
    expect(RiggingError.hasCode(a.lost.reason, 'locks.lost')).toBe(true);
    const b = await locks.acquire('k', { timeoutMs: 1000 });
    expect(b.token).toBeGreaterThan(a.token);
    await a.release();
    await b.release();
    locks.close();
  });

  it('blocked waits do not occupy the libuv thread pool', async () => {
    const dir = freshDir();
    const holder = new FileLock({ dir });
    const held = await Promise.all(Array.from({ length: 8 }, (_, i) => holder.acquire(`k${i}`)));
    const waiters = new FileLock({ dir });
    const waits = held.map((_, i) => waiters.acquire(`k${i}`));
    const started = Date.now();
    for (let i = 0; i < 20; i++) await readFile(join(dir, readdirSync(dir)[0]!));
    expect(Date.now() - started).toBeLessThan(10_000); // a blocked pool would hang forever
    await Promise.all(held.map((l) => l.release()));
    await Promise.all((await Promise.all(waits)).map((l) => l.release()));
    holder.close();
    waiters.close();
  });

  for (const kind of ['file', 'two-level'] as const) {
    it(`counts exactly with 3 processes x 100 iterations (${kind})`, async () => {
      const dir = freshDir();
      const counter = join(root, `counter-${kind}`);
      writeFileSync(counter, '0');
      const kids = [0, 1, 2].map(() => spawnNode(worker, ['counter', kind, dir, counter, '100']));
      await Promise.all(kids.map((k) => k.waitForLine('done', 60_000)));
      await Promise.all(kids.map((k) => k.exited));
      expect(Number(readFileSync(counter, 'utf8'))).toBe(300);
    }, 90_000);

    it(`keeps tokens strictly increasing across 3 processes taking turns (${kind})`, async () => {
      const dir = freshDir();
      const log = join(root, `tokens-${kind}`);
      writeFileSync(log, '');
      const kids = [0, 1, 2].map(() => spawnNode(worker, ['tokens', kind, dir, log, '300']));
      await Promise.all(kids.map((k) => k.waitForLine('done', 60_000)));
      await Promise.all(kids.map((k) => k.exited));
      const grants = readFileSync(log, 'utf8')
        .trim()
        .split('\n')
        .map((line) => ({ mode: line[0], token: BigInt(line.slice(2)) }));
      expect(grants).toHaveLength(900);
      // exclusive grants are totally ordered by the log; a shared grant may be logged after a
      // later shared one, but never after a later exclusive one
      let lastExclusive = -1n;
      let highest = -1n;
      for (const g of grants) {
        if (g.mode === 'e') {
          expect(g.token).toBeGreaterThan(highest);
          lastExclusive = g.token;
        } else expect(g.token).toBeGreaterThan(lastExclusive);
        if (g.token > highest) highest = g.token;
      }
      expect(new Set(grants.map((g) => g.token)).size).toBe(900);
    }, 90_000);

    it(`hands over at once when a holder is SIGKILLed, with a greater token (${kind})`, async () => {
      const dir = freshDir();
      const child = spawnNode(worker, ['hold', kind, dir, 'k']);
      try {
        const line = await child.waitForLine(/^held /, 30_000);
        const childToken = BigInt(line.slice(5));
        const locks = kind === 'file' ? new FileLock({ dir }) : new TwoLevelLock({ dir });
        expect(await locks.holder('k')).toMatchObject({ mode: 'exclusive', pid: child.pid });
        expect(await locks.tryAcquire('k')).toBeUndefined();
        child.kill('SIGKILL');
        await child.exited;
        // no lease to expire: the lock went with the process, so a try that does not wait wins
        const lease = await locks.tryAcquire('k');
        expect(lease?.token).toBeGreaterThan(childToken);
        await lease?.release();
        // and a waiter queued behind a holder that is then killed is granted without a timeout
        const again = spawnNode(worker, ['hold', kind, dir, 'k']);
        try {
          const next = BigInt((await again.waitForLine(/^held /, 30_000)).slice(5));
          expect(next).toBeGreaterThan(lease!.token);
          const waiting = locks.acquire('k');
          again.kill('SIGKILL');
          expect((await waiting).token).toBeGreaterThan(next);
        } finally {
          again.kill('SIGKILL');
        }
        locks.close();
      } finally {
        child.kill('SIGKILL');
      }
    }, 60_000);
  }
});

describe('TwoLevelLock', () => {
  it('queues in-process waiters in memory and shares with shared holders', async () => {
    const locks = new TwoLevelLock({ dir: freshDir() });
    const order: number[] = [];
    const a = await locks.acquire('k');
    const ps = [1, 2, 3].map((i) =>
      locks.acquire('k').then(async (l) => {
        order.push(i);
        await l.release();
      }),
    );
    await a.release();
    await Promise.all(ps);
    expect(order).toEqual([1, 2, 3]);
    const s1 = await locks.acquire('k', { mode: 'shared' });
    const s2 = await locks.acquire('k', { mode: 'shared' });
    expect(await locks.tryAcquire('k')).toBeUndefined();
    await s1.release();
    await s2.release();
    const t = await locks.acquire('k', { timeoutMs: 100 });
    await t.release();
    locks.close();
  });
});

describe('FileLock waits', () => {
  it('explains waits with lock:waiting and leaves nothing behind after many aborted waits', async () => {
    const dir = freshDir();
    const holderSide = new FileLock({ dir });
    const locks = new FileLock({ dir });
    const held = await holderSide.acquire('busy');
    const waiting: unknown[] = [];
    const off = locks.events.on('lock:waiting', (e) => waiting.push(e));
    const t = await locks.acquire('busy', { timeoutMs: 5 }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(t, 'locks.timeout')).toBe(true);
    expect(waiting[0]).toMatchObject({
      key: 'busy',
      mode: 'exclusive',
      holder: { pid: process.pid, mode: 'exclusive' },
    });
    off();
    const ac = new AbortController();
    const ps: Promise<unknown>[] = [];
    for (let i = 0; i < 2000; i++)
      ps.push(locks.acquire('busy', { signal: ac.signal }).catch((e: unknown) => e));
    ac.abort();
    const errors = await Promise.all(ps);
    expect(errors.every((e) => RiggingError.hasCode(e, 'locks.aborted'))).toBe(true);
    await held.release();
    const next = await locks.acquire('busy', { timeoutMs: 1000 });
    expect(next.token).toBeGreaterThan(held.token);
    await next.release();
    locks.close();
    holderSide.close();
  });
});

describe('FileLock loss', () => {
  it('a release after loss is a no-op that says so in lock:released', async () => {
    const dir = freshDir();
    const locks = new FileLock({ dir, checkIntervalMs: 10 });
    const events: { event: string; afterLoss?: boolean }[] = [];
    locks.events.onAny((event, payload) =>
      events.push({ event, afterLoss: (payload as { afterLoss?: boolean }).afterLoss }),
    );
    const lease = await locks.acquire('gone');
    rmSync(locks.pathOf('gone'));
    await new Promise<void>((r) => lease.lost.addEventListener('abort', () => r(), { once: true }));
    await lease.release();
    await lease.release();
    expect(events).toEqual([
      { event: 'lock:acquired', afterLoss: undefined },
      { event: 'lock:lost', afterLoss: undefined },
      { event: 'lock:released', afterLoss: true },
    ]);
    locks.close();
  });
});
