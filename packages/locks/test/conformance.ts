// The LockProvider contract, run against every provider (memory, file, two-level, each SQL backend).
import { RiggingError, type Lease, type LockProvider } from '@rigging/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocksError, acquireAll, assertHeld } from '../src/index.js';
import type { LockEvents } from '../src/index.js';
import type { TypedEmitter } from '@rigging/core';

export interface ConformanceTarget {
  /** Two providers that contend for the same keys (two sessions/instances where that matters). */
  pair(): Promise<[LockProvider, LockProvider]>;
  /**
   * Takes a held lease of the first provider away from outside (revoked, lock file removed,
   * session killed, row or key deleted), as a crash or an expiry would; the provider notices
   * on its own.
   */
  lose(lease: Lease): Promise<void>;
  /** What the backend holds for `key` (lock file, rows, keys), to show a call changed nothing. */
  snapshot?(key: string): Promise<unknown>;
  close?(): Promise<void>;
}

type WithEvents = LockProvider & { events?: TypedEmitter<LockEvents> };

let seq = 0;
const k = (name: string) => `${name}-${process.pid}-${seq++}`;

export function conformance(name: string, make: () => Promise<ConformanceTarget>): void {
  describe(`LockProvider contract: ${name}`, () => {
    let target: ConformanceTarget;
    let a: LockProvider;
    let b: LockProvider;
    beforeAll(async () => {
      target = await make();
      [a, b] = await target.pair();
    });
    afterAll(async () => {
      await target?.close?.();
    });

    it('excludes exclusive holders and hands over with a greater token', async () => {
      const key = k('x');
      const l1 = await a.acquire(key);
      expect(await b.tryAcquire(key)).toBeUndefined();
      const waiting = b.acquire(key, { timeoutMs: 10_000 });
      await new Promise((r) => setTimeout(r, 20));
      await l1.release();
      const l2 = await waiting;
      expect(l2.token).toBeGreaterThan(l1.token);
      expect(l2.mode).toBe('exclusive');
      expect(l2.key).toBe(key);
      await l2.release();
    });

    it('shares shared holders and excludes exclusive ones', async () => {
      const key = k('s');
      const s1 = await a.acquire(key, { mode: 'shared' });
      const s2 = await b.acquire(key, { mode: 'shared', timeoutMs: 5000 });
      expect(s2.token).not.toBe(s1.token);
      expect(await a.tryAcquire(key)).toBeUndefined();
      expect(await b.tryAcquire(key)).toBeUndefined();
      await s1.release();
      expect(await b.tryAcquire(key)).toBeUndefined();
      await s2.release();
      const x = await a.acquire(key, { timeoutMs: 5000 });
      expect(x.token).toBeGreaterThan(s2.token);
      expect(await b.tryAcquire(key, { mode: 'shared' })).toBeUndefined();
      await x.release();
    });

    it('times out with locks.timeout and aborts with locks.aborted, then still works', async () => {
      const key = k('t');
      const l1 = await a.acquire(key);
      const t = await b.acquire(key, { timeoutMs: 30 }).catch((e: unknown) => e);
      expect(RiggingError.hasCode(t, 'locks.timeout')).toBe(true);
      expect(LocksError.isInstance(t)).toBe(true);
      const ac = new AbortController();
      const p = b.acquire(key, { signal: ac.signal }).catch((e: unknown) => e);
      setTimeout(() => ac.abort(new Error('stop')), 10);
      const e = await p;
      expect(RiggingError.hasCode(e, 'locks.aborted')).toBe(true);
      expect((e as Error).cause).toBeInstanceOf(Error);
      const pre = await b
        .acquire(key, { signal: AbortSignal.abort('x') })
        .catch((err: unknown) => err);
      expect(RiggingError.hasCode(pre, 'locks.aborted')).toBe(true);
      await l1.release();
      const l2 = await b.acquire(key, { timeoutMs: 5000 });
      await l2.release();
    });

    it('release is idempotent, await using releases, and events are emitted', async () => {
      const key = k('r');
      const events: string[] = [];
      const off = (a as WithEvents).events?.onAny((event) => events.push(event));
      {
        await using lease = await a.acquire(key);
        assertHeld(lease);
        expect(lease.lost.aborted).toBe(false);
      }
      const again = await a.acquire(key, { timeoutMs: 5000 });
      await again.release();
      await again.release();
      off?.();
      if ((a as WithEvents).events) {
        expect(events).toEqual([
          'lock:acquired',
          'lock:released',
          'lock:acquired',
          'lock:released',
        ]);
      }
    });

    it('rejects invalid keys and modes with TypeErrors naming the value', async () => {
      await expect(a.acquire('')).rejects.toThrow(TypeError);
      await expect(a.acquire(42 as never)).rejects.toThrow(/42/);
      await expect(a.acquire('ok', { mode: 'both' as never })).rejects.toThrow(/"both"/);
      await expect(a.acquire('ok', { timeoutMs: -1 })).rejects.toThrow(/-1/);
      await expect(a.tryAcquire('ok', { mode: 'both' as never })).rejects.toThrow(TypeError);
    });

    it('rejects an already-aborted signal on a free key, with no side effect', async () => {
      const key = k('pre');
      const before = await target.snapshot?.(key);
      const events: string[] = [];
      const off = (a as WithEvents).events?.onAny((event) => events.push(event));
      const reason = new Error('stop');
      const e = await a
        .acquire(key, { signal: AbortSignal.abort(reason) })
        .catch((err: unknown) => err);
      off?.();
      expect(RiggingError.hasCode(e, 'locks.aborted')).toBe(true);
      expect((e as Error).cause).toBe(reason);
      expect(events).toEqual([]);
      expect(await target.snapshot?.(key)).toEqual(before);
      // nothing is held and no waiter was left: both providers get the key at once
      const l1 = await a.tryAcquire(key);
      expect(l1).toBeDefined();
      await l1?.release();
      const l2 = await b.tryAcquire(key);
      expect(l2).toBeDefined();
      await l2?.release();
    });

    it('validates options on every call, contended or not, before anything changes', async () => {
      const key = k('opt');
      const before = await target.snapshot?.(key);
      for (const timeoutMs of [-5, Number.NaN, '10' as never]) {
        const e = await a.acquire(key, { timeoutMs }).catch((err: unknown) => err);
        expect(e).toBeInstanceOf(TypeError);
        expect((e as Error).message).toMatch(/timeoutMs must be a number >= 0/);
      }
      expect(await target.snapshot?.(key)).toEqual(before);
      const held = await b.acquire(key);
      const contended = await a.acquire(key, { timeoutMs: -5 }).catch((err: unknown) => err);
      expect(contended).toBeInstanceOf(TypeError);
      expect((contended as Error).message).toMatch(/timeoutMs must be a number >= 0.*-5/);
      // Infinity waits like no timeout at all
      const waiting = a.acquire(key, { timeoutMs: Infinity });
      await new Promise((r) => setTimeout(r, 20));
      await held.release();
      const granted = await waiting;
      expect(granted.token).toBeGreaterThan(held.token);
      await granted.release();
    });

    it('releases once however often release and dispose are called', async () => {
      const key = k('dd');
      const released: boolean[] = [];
      const off = (a as WithEvents).events?.on('lock:released', (e) => released.push(e.afterLoss));
      // (the pair may be one provider: b's release below is counted after `off`)
      const lease = await a.acquire(key);
      await Promise.all([lease.release(), lease.release(), lease[Symbol.asyncDispose]()]);
      await lease.release();
      {
        await using disposed = await a.acquire(key, { timeoutMs: 5000 });
        await disposed.release(); // disposal at the end of the block is then a no-op
      }
      off?.();
      if ((a as WithEvents).events) expect(released).toEqual([false, false]);
      const next = await b.acquire(key, { timeoutMs: 5000 });
      await next.release();
    });

    it('after a loss: lost fires with locks.lost, release is a no-op, others acquire', async () => {
      const key = k('loss');
      const events: { event: string; token: bigint; afterLoss?: boolean }[] = [];
      const offLost = (a as WithEvents).events?.on('lock:lost', (e) =>
        events.push({ event: 'lost', token: e.token }),
      );
      const offReleased = (a as WithEvents).events?.on('lock:released', (e) =>
        events.push({ event: 'released', token: e.token, afterLoss: e.afterLoss }),
      );
      const lease = await a.acquire(key);
      const lost = new Promise<unknown>((resolve) =>
        lease.lost.addEventListener('abort', () => resolve(lease.lost.reason), { once: true }),
      );
      await target.lose(lease);
      const reason = await lost;
      expect(RiggingError.hasCode(reason, 'locks.lost')).toBe(true);
      expect(LocksError.isInstance(reason)).toBe(true);
      expect(() => assertHeld(lease)).toThrow(/lost/);
      const next = await b.acquire(key, { timeoutMs: 20_000 });
      expect(next.token).toBeGreaterThan(lease.token);
      await lease.release();
      await lease.release();
      {
        await using after = lease; // disposing a lost lease is a no-op as well
        expect(after.lost.aborted).toBe(true);
      }
      // the loss freed nothing of the new holder's
      expect(await a.tryAcquire(key)).toBeUndefined();
      await next.release();
      offLost?.();
      offReleased?.();
      if ((a as WithEvents).events) {
        expect(events.filter((e) => e.token === lease.token)).toEqual([
          { event: 'lost', token: lease.token },
          { event: 'released', token: lease.token, afterLoss: true },
        ]);
      }
      const again = await a.acquire(key, { timeoutMs: 20_000 });
      expect(again.token).toBeGreaterThan(next.token);
      await again.release();
    }, 60_000);

    it('acquireAll takes keys in one order and releases all on failure', async () => {
      const [k1, k2, k3] = [k('m1'), k('m2'), k('m3')];
      const blocker = await b.acquire(k3);
      const failed = await acquireAll(a, [k3, k1, k2], { timeoutMs: 50 }).catch((e: unknown) => e);
      expect(RiggingError.hasCode(failed, 'locks.timeout')).toBe(true);
      // k1 and k2 were released again
      const t1 = await b.tryAcquire(k1);
      expect(t1).toBeDefined();
      await t1?.release();
      await blocker.release();
      // opposite orders from two callers do not deadlock
      const runs = await Promise.all([
        acquireAll(a, [k1, k2, k3], { timeoutMs: 10_000 }).then((m) => m.release()),
        acquireAll(b, [k3, k2, k1], { timeoutMs: 10_000 }).then((m) => m.release()),
      ]);
      expect(runs).toHaveLength(2);
      const m = await acquireAll(a, [k1, { key: k2, mode: 'shared' }]);
      expect(m.leases.map((l: Lease) => l.key)).toEqual([k1, k2].sort());
      expect(m.get(k2)?.mode).toBe('shared');
      await m.release();
    });

    it('tells who holds a key, where it can', async () => {
      if (!a.holder) return;
      const key = k('h');
      expect(await a.holder(key)).toBeUndefined();
      const l = await a.acquire(key);
      const h = await b.holder?.(key);
      expect(h?.mode).toBe('exclusive');
      expect(h?.since).toBeGreaterThan(Date.now() - 60_000);
      await l.release();
      expect(await a.holder(key)).toBeUndefined();
    });

    it('serialises a read-modify-write across both providers', async () => {
      const key = k('c');
      let counter = 0;
      let inside = 0;
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const p = i % 2 ? a : b;
          const lease = await p.acquire(key, { timeoutMs: 30_000 });
          inside++;
          expect(inside).toBe(1);
          const v = counter;
          await new Promise((r) => setTimeout(r, 1));
          counter = v + 1;
          inside--;
          await lease.release();
        }),
      );
      expect(counter).toBe(20);
    }, 60_000);
  });
}
