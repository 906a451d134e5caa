import { RiggingError, manualClock } from '@rigging/core';
import { describe, expect, it } from 'vitest';
import { KeyedLock, Mutex, ReadWriteLock, Semaphore, memoryLockProvider } from '../src/index.js';

describe('Mutex', () => {
  it('is FIFO, idempotent to release, and cleans up aborted waits', async () => {
    const m = new Mutex();
    const order: number[] = [];
    const r = await m.acquire();
    const ps = [1, 2, 3].map((i) => m.runExclusive(() => order.push(i)));
    r();
    r();
    await Promise.all(ps);
    expect(order).toEqual([1, 2, 3]);
    const hold = await m.acquire();
    const t = await m.acquire({ timeoutMs: 5 }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(t, 'locks.timeout')).toBe(true);
    expect(m.waiting).toBe(0);
    hold();
    expect(m.isLocked()).toBe(false);
  });

  it('leaves no listeners behind over 100k aborted waits', async () => {
    const m = new Mutex();
    const hold = await m.acquire();
    const ac = new AbortController();
    let added = 0;
    let removed = 0;
    const signal = ac.signal;
    const origAdd = signal.addEventListener.bind(signal);
    const origRemove = signal.removeEventListener.bind(signal);
    signal.addEventListener = ((...a: Parameters<typeof origAdd>) => {
      added++;
      origAdd(...a);
    }) as typeof signal.addEventListener;
    signal.removeEventListener = ((...a: Parameters<typeof origRemove>) => {
      removed++;
      origRemove(...a);
    }) as typeof signal.removeEventListener;
    for (let round = 0; round < 100; round++) {
      const inner = new AbortController();
      const ps: Promise<unknown>[] = [];
      for (let i = 0; i < 1000; i++) {
        ps.push(m.acquire({ signal: inner.signal, timeoutMs: 60_000 }).catch((e: unknown) => e));
      }
      // a shared long-lived signal too: granted/timeouts must remove their listener
      ps.push(m.acquire({ signal, timeoutMs: 0 }).catch((e: unknown) => e));
      inner.abort();
      const errors = await Promise.all(ps);
      expect(errors.every((e) => RiggingError.isInstance(e))).toBe(true);
    }
    expect(m.waiting).toBe(0);
    expect(added).toBe(100);
    expect(removed).toBe(100);
    hold();
  }, 60_000);
});

describe('Semaphore', () => {
  it('limits concurrency, keeps FIFO for heavy waiters', async () => {
    const s = new Semaphore(3);
    let running = 0;
    let max = 0;
    await Promise.all(
      Array.from({ length: 20 }, () =>
        s.runExclusive(async () => {
          running++;
          max = Math.max(max, running);
          await new Promise((r) => setTimeout(r, 1));
          running--;
        }),
      ),
    );
    expect(max).toBe(3);
    const r1 = await s.acquire();
    const heavy = s.acquire({ weight: 3 });
    expect(s.tryAcquire()).toBeUndefined(); // no barging past the heavy waiter
    r1();
    (await heavy)();
    expect(s.getValue()).toBe(3);
    expect(() => new Semaphore(0)).toThrow(TypeError);
  });
});

describe('ReadWriteLock', () => {
  it('does not starve writers under a stream of readers (fifo)', async () => {
    const rw = new ReadWriteLock();
    const r1 = await rw.acquire({ mode: 'shared' });
    const w = rw.acquire({ mode: 'exclusive' });
    const lateReader = rw.tryAcquire('shared');
    expect(lateReader).toBeUndefined();
    r1();
    const rw1 = await w;
    expect(rw.writer).toBe(true);
    rw1();
  });

  it("'read' preference admits all waiting readers after a writer", async () => {
    const rw = new ReadWriteLock({ preference: 'read' });
    const w1 = await rw.acquire();
    const events: string[] = [];
    const p = [
      rw.runShared(() => events.push('r1')),
      rw.runExclusive(() => events.push('w2')),
      rw.runShared(() => events.push('r2')),
    ];
    w1();
    await Promise.all(p);
    expect(events).toEqual(['r1', 'r2', 'w2']);
  });

  it("'write' preference serves waiting writers first", async () => {
    const rw = new ReadWriteLock({ preference: 'write' });
    const r0 = await rw.acquire();
    const events: string[] = [];
    const p = [rw.runShared(() => events.push('r1')), rw.runExclusive(() => events.push('w1'))];
    r0();
    await Promise.all(p);
    expect(events).toEqual(['w1', 'r1']);
    expect(() => new ReadWriteLock({ preference: 'x' as never })).toThrow(/"x"/);
  });
});

describe('KeyedLock', () => {
  it('frees idle keys', async () => {
    const k = new KeyedLock();
    for (let i = 0; i < 10_000; i++) await k.runExclusive(`k${i}`, () => undefined);
    expect(k.size).toBe(0);
    const r = await k.acquire('a');
    const t = await k.acquire('a', { timeoutMs: 1 }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(t, 'locks.timeout')).toBe(true);
    r();
    expect(k.size).toBe(0);
    expect(() => k.tryAcquire('')).toThrow(TypeError);
  });
});

describe('InProcessLockProvider', () => {
  it('grants increasing tokens, reports holders, and revokes', async () => {
    const p = memoryLockProvider();
    const a = await p.acquire('k');
    expect(await p.holder('k')).toMatchObject({ mode: 'exclusive', pid: process.pid });
    p.revoke('k');
    expect(a.lost.aborted).toBe(true);
    const b = await p.acquire('k');
    expect(b.token).toBeGreaterThan(a.token);
    await a.release();
    expect(await p.tryAcquire('k')).toBeUndefined();
    await b.release();
    expect(p.size).toBe(0);
  });
});

describe('fencing helpers', () => {
  it('assertHeld throws locks.lost after loss; FencingGuard refuses older tokens', async () => {
    const { assertHeld, FencingGuard } = await import('../src/index.js');
    const p = memoryLockProvider();
    const first = await p.acquire('res');
    assertHeld(first);
    p.revoke('res', 'session gone');
    expect(() => assertHeld(first)).toThrow(/lost: session gone/);
    const second = await p.acquire('res');
    const guard = new FencingGuard();
    guard.check('res', second.token);
    let caught: unknown;
    try {
      guard.check('res', first.token); // the old holder wakes up and tries to write
    } catch (error) {
      caught = error;
    }
    expect(RiggingError.hasCode(caught, 'locks.stale')).toBe(true);
    expect(guard.highest('res')).toBe(second.token);
    await second.release();
  });
});

describe('the wait contract of every primitive', () => {
  const primitives = {
    Mutex: () => {
      const m = new Mutex();
      return { acquire: (o: object) => m.acquire(o), locked: () => m.isLocked() };
    },
    Semaphore: () => {
      const s = new Semaphore(1);
      return { acquire: (o: object) => s.acquire(o), locked: () => s.isLocked() };
    },
    ReadWriteLock: () => {
      const l = new ReadWriteLock();
      return { acquire: (o: object) => l.acquire(o), locked: () => l.writer || l.readers > 0 };
    },
    KeyedLock: () => {
      const l = new KeyedLock();
      return { acquire: (o: object) => l.acquire('k', o), locked: () => l.size > 0 };
    },
  };

  for (const [name, make] of Object.entries(primitives)) {
    it(`${name}: an already-aborted signal rejects with locks.aborted and takes nothing`, async () => {
      const p = make();
      const reason = new Error('stop');
      const e = await p.acquire({ signal: AbortSignal.abort(reason) }).catch((err: unknown) => err);
      expect(RiggingError.hasCode(e, 'locks.aborted')).toBe(true);
      expect((e as Error).cause).toBe(reason);
      expect(p.locked()).toBe(false);
    });

    it(`${name}: bad timeouts reject with a TypeError, contended or not`, async () => {
      const p = make();
      for (const timeoutMs of [-5, Number.NaN, '1']) {
        const e = await p.acquire({ timeoutMs }).catch((err: unknown) => err);
        expect(e).toBeInstanceOf(TypeError);
        expect((e as Error).message).toMatch(/timeoutMs must be a number >= 0/);
      }
      expect(p.locked()).toBe(false);
      const release = await p.acquire({});
      await expect(p.acquire({ timeoutMs: -5 })).rejects.toThrow(/-5/);
      // Infinity means no timeout
      const waiting = p.acquire({ timeoutMs: Infinity });
      await new Promise((r) => setTimeout(r, 10));
      release();
      release();
      (await waiting)();
      expect(p.locked()).toBe(false);
    });
  }
});

describe('timeouts on an injected clock', () => {
  it('time out when the clock says so, with no real wait', async () => {
    const clock = manualClock();
    const m = new Mutex({ clock });
    const keyed = new KeyedLock({ clock });
    const provider = memoryLockProvider({ clock });
    const release = await m.acquire();
    const held = await keyed.acquire('k');
    const lease = await provider.acquire('k');
    const waits = [
      m.acquire({ timeoutMs: 60_000 }),
      keyed.acquire('k', { timeoutMs: 60_000 }),
      provider.acquire('k', { timeoutMs: 60_000 }),
    ].map((p) => p.catch((e: unknown) => e));
    let settled = 0;
    for (const w of waits) void w.then(() => settled++);
    await clock.advance(59_999);
    expect(settled).toBe(0);
    await clock.advance(1);
    for (const e of await Promise.all(waits)) {
      expect(RiggingError.hasCode(e, 'locks.timeout')).toBe(true);
    }
    expect(m.waiting).toBe(0);
    release();
    held();
    await lease.release();
    expect(keyed.size).toBe(0);
    expect(provider.size).toBe(0);
  });

  it('rejects a clock that is not one', () => {
    expect(() => new Mutex({ clock: {} as never })).toThrow(/clock must be a Clock/);
    expect(() => memoryLockProvider({ clock: 5 as never })).toThrow(TypeError);
  });
});
