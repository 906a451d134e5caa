// What every provider's leases, events and errors promise (the parts they share): the payloads
// of `lock:*` events, a lease's loss and release, the errors a wait ends with, the validation of
// keys, modes and clocks, and how a holder is described.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RiggingError, manualClock, systemClock, type LockHolder } from '@rigging/core';
import { describe, expect, it } from 'vitest';
import {
  FileLock,
  LocksError,
  describeHolder,
  memoryLockProvider,
  type LockEvents,
} from '../src/index.js';
import { LeaseImpl, newEmitter } from '../src/common.js';

type Logged = { [E in keyof LockEvents]: [E, LockEvents[E]] }[keyof LockEvents];

function logOf(events: ReturnType<typeof newEmitter>): Logged[] {
  const log: Logged[] = [];
  events.onAny((event, payload) => log.push([event, payload] as Logged));
  return log;
}

/** A lease as a provider makes it, whose release runs `onRelease`. */
function leaseOf(onRelease: (lease: LeaseImpl) => void | Promise<void> = () => {}) {
  const clock = manualClock(1000);
  const events = newEmitter();
  const lease = new LeaseImpl({
    key: 'k',
    mode: 'shared',
    token: 7n,
    provider: 'test',
    events,
    clock,
    onRelease,
  });
  return { lease, clock, events, log: logOf(events) };
}

describe('lock:* events', () => {
  it('say who waited, got, held and gave back which key, with the token and the times', async () => {
    const clock = manualClock(5000);
    const p = memoryLockProvider({ clock, name: 'mine' });
    const log = logOf(p.events);
    const first = await p.acquire('k');
    const waiting = p.acquire('k', { mode: 'shared' });
    await clock.advance(250);
    await first.release();
    const second = await waiting;
    await clock.advance(40);
    p.revoke('k', 'session gone');
    await second.release();
    expect(log).toEqual([
      ['lock:acquired', { provider: 'mine', key: 'k', mode: 'exclusive', token: 1n, waitedMs: 0 }],
      [
        'lock:waiting',
        {
          provider: 'mine',
          key: 'k',
          mode: 'shared',
          holder: { mode: 'exclusive', since: 5000, pid: process.pid, count: 1 },
          since: 5000,
        },
      ],
      [
        'lock:released',
        {
          provider: 'mine',
          key: 'k',
          mode: 'exclusive',
          token: 1n,
          heldMs: 250,
          afterLoss: false,
        },
      ],
      ['lock:acquired', { provider: 'mine', key: 'k', mode: 'shared', token: 2n, waitedMs: 250 }],
      [
        'lock:lost',
        {
          provider: 'mine',
          key: 'k',
          mode: 'shared',
          token: 2n,
          heldMs: 40,
          reason: 'session gone',
        },
      ],
      [
        'lock:released',
        { provider: 'mine', key: 'k', mode: 'shared', token: 2n, heldMs: 40, afterLoss: true },
      ],
    ]);
  });
});

describe('a lease', () => {
  it('lost: aborts `lost` with locks.lost naming key, token and reason, once, and calls its watchers', async () => {
    const { lease, clock, log } = leaseOf();
    const watched: string[] = [];
    lease.watchLoss(() => watched.push('a'));
    const stop = lease.watchLoss(() => watched.push('b'));
    stop();
    expect(lease.isLost).toBe(false);
    expect(lease.settled).toBe(false);
    const cause = new Error('connection reset');
    await clock.advance(300);
    lease.markLost('session gone', cause);
    lease.markLost('again');
    expect(watched).toEqual(['a']);
    expect(lease.isLost).toBe(true);
    expect(lease.settled).toBe(true);
    expect(lease.released).toBe(false);
    const reason = lease.lost.reason as LocksError;
    expect(lease.lost.aborted).toBe(true);
    expect(RiggingError.hasCode(reason, 'locks.lost')).toBe(true);
    expect(reason.message).toBe('lock "k" was lost: session gone');
    expect(reason.cause).toBe(cause);
    expect(reason.details).toEqual({ key: 'k', token: '7', reason: 'session gone' });
    expect(log).toEqual([
      [
        'lock:lost',
        {
          provider: 'test',
          key: 'k',
          mode: 'shared',
          token: 7n,
          heldMs: 300,
          reason: 'session gone',
        },
      ],
    ]);
  });

  it('lost while someone already looks at `lost`: the same signal is aborted', () => {
    const { lease } = leaseOf();
    const signal = lease.lost;
    expect(signal.aborted).toBe(false);
    lease.markLost('expired');
    expect(lease.lost).toBe(signal);
    expect(signal.aborted).toBe(true);
  });

  it('released: a later loss changes nothing, and a watcher stopped in time is never called', async () => {
    const { lease, log } = leaseOf();
    let watched = 0;
    lease.watchLoss(() => watched++);
    await lease.release();
    expect(lease.released).toBe(true);
    expect(lease.settled).toBe(true);
    lease.markLost('too late');
    expect(lease.isLost).toBe(false);
    expect(lease.lost.aborted).toBe(false);
    expect(watched).toBe(0);
    expect(log.map(([event]) => event)).toEqual(['lock:released']);
  });

  it('releases once: the provider is told once, every call gets a promise, sync or not', async () => {
    let calls = 0;
    const sync = leaseOf(() => {
      calls++;
    });
    const results = [sync.lease.release(), sync.lease.release(), sync.lease[Symbol.asyncDispose]()];
    for (const r of results) expect(r).toBeInstanceOf(Promise);
    await Promise.all(results);
    expect(calls).toBe(1);
    expect(sync.lease.releaseNow()).toBeUndefined();

    let finish!: () => void;
    const slow = leaseOf(
      () =>
        new Promise<void>((resolve) => {
          calls++;
          finish = resolve;
        }),
    );
    const first = slow.lease.release();
    expect(slow.lease.released).toBe(true);
    expect(slow.lease.release()).toBe(first);
    expect(slow.lease.releaseNow()).toBe(first);
    await Promise.resolve();
    // lock:released only once the provider has let go
    expect(slow.log).toEqual([]);
    finish();
    await first;
    expect(calls).toBe(2);
    expect(slow.log.map(([event]) => event)).toEqual(['lock:released']);
  });

  it('a provider failing to let go: release rejects with its error, and no lock:released', async () => {
    const boom = new Error('disk gone');
    for (const onRelease of [
      () => {
        throw boom;
      },
      () => Promise.reject(boom),
    ]) {
      const { lease, log } = leaseOf(onRelease);
      await expect(lease.release()).rejects.toBe(boom);
      await expect(lease.release()).rejects.toBe(boom);
      expect(log).toEqual([]);
    }
  });
});

describe('errors a wait ends with', () => {
  it('locks.timeout names the key, the time waited and who holds it (file locks)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rigging-locks-common-'));
    const a = new FileLock({ dir });
    const b = new FileLock({ dir });
    try {
      const held = await a.acquire('job');
      const e = (await b.acquire('job', { timeoutMs: 30 }).catch((x: unknown) => x)) as LocksError;
      expect(RiggingError.hasCode(e, 'locks.timeout')).toBe(true);
      expect(e.message).toMatch(
        new RegExp(
          `^timed out after 30 ms waiting for lock "job" \\(held exclusive by pid ${process.pid} on .+ since \\d\\d:\\d\\d:\\d\\d\\)$`,
        ),
      );
      expect(e.details).toEqual({ key: 'job', timeoutMs: 30 });
      await held.release();
    } finally {
      a.close();
      b.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('locks.timeout without a known holder, and locks.aborted with the reason as cause', async () => {
    const clock = manualClock();
    const p = memoryLockProvider({ clock });
    const held = await p.acquire('job');
    const timedOut = p.acquire('job', { timeoutMs: 100 }).catch((x: unknown) => x);
    await clock.advance(100);
    const e = (await timedOut) as LocksError;
    expect(RiggingError.hasCode(e, 'locks.timeout')).toBe(true);
    expect(e.message).toBe('timed out after 100 ms waiting for lock "job"');
    const reason = new Error('shutting down');
    const ac = new AbortController();
    const aborted = p.acquire('job', { signal: ac.signal }).catch((x: unknown) => x);
    ac.abort(reason);
    const a = (await aborted) as LocksError;
    expect(RiggingError.hasCode(a, 'locks.aborted')).toBe(true);
    expect(a.message).toBe('wait for lock "job" was aborted');
    expect(a.cause).toBe(reason);
    expect(a.details).toEqual({ key: 'job' });
    await held.release();
  });
});

describe('validation', () => {
  it('keys: non-empty strings of at most 1024 characters without NUL', async () => {
    const p = memoryLockProvider();
    for (const key of ['a', 'x'.repeat(1024), 'with space/and:colons']) {
      const lease = await p.tryAcquire(key);
      expect(lease?.key).toBe(key);
      await lease?.release();
    }
    for (const key of ['', 'x'.repeat(1025), 'a\0b', 42, undefined, null]) {
      const e = await p.acquire(key as string).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(TypeError);
      expect((e as Error).message).toMatch(
        /^lock key must be a non-empty string of at most 1024 characters without NUL, got /,
      );
      await expect(p.tryAcquire(key as string)).rejects.toThrow(TypeError);
    }
    await expect(p.acquire('')).rejects.toThrow(/got ""$/);
    expect(p.size).toBe(0);
  });

  it("modes: 'exclusive' by default, 'shared', nothing else", async () => {
    const p = memoryLockProvider();
    const x = await p.acquire('m', {});
    expect(x.mode).toBe('exclusive');
    await x.release();
    const s = await p.acquire('m', { mode: 'shared' });
    expect(s.mode).toBe('shared');
    await s.release();
    const e = await p.acquire('m', { mode: 'Shared' as never }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(TypeError);
    expect((e as Error).message).toBe(`mode must be 'shared' or 'exclusive', got "Shared"`);
  });

  it('clocks: anything with now() and sleep(), else a TypeError naming the provider', () => {
    expect(() => memoryLockProvider({ clock: systemClock })).not.toThrow();
    expect(() =>
      memoryLockProvider({ clock: { now: () => 0, sleep: async () => {} } }),
    ).not.toThrow();
    for (const clock of [
      null,
      42,
      'clock',
      { now: () => 0 },
      { sleep: async () => {} },
      { now: 0, sleep: async () => {} },
      Object.assign(() => 0, { now: () => 0, sleep: async () => {} }),
    ]) {
      expect(() => memoryLockProvider({ clock: clock as never }), String(clock)).toThrow(
        /^InProcessLockProvider: clock must be a Clock \(\{ now, sleep \}\), got /,
      );
    }
  });
});

describe('describeHolder', () => {
  const since = Date.UTC(2026, 10, 25, 12, 1, 7, 500);
  it('says the mode, who, how many and since when (UTC)', () => {
    const cases: [LockHolder, string][] = [
      [
        { mode: 'exclusive', since, pid: 4123, host: 'web-1', owner: 'deploy' },
        'held exclusive by pid 4123 on web-1 owner deploy since 12:01:07',
      ],
      [
        { mode: 'shared', since, pid: 9, count: 3 },
        'held shared by pid 9 (3 holders) since 12:01:07',
      ],
      [
        { mode: 'shared', since, pid: 9, host: 'db', count: 1 },
        'held shared by pid 9 on db since 12:01:07',
      ],
      [{ mode: 'exclusive', since: 0 }, 'held exclusive since 00:00:00'],
      [
        { mode: 'shared', since, owner: 'x', count: 2 },
        'held shared by owner x (2 holders) since 12:01:07',
      ],
      [{ mode: 'shared', since, pid: 0 }, 'held shared by pid 0 since 12:01:07'],
    ];
    for (const [holder, text] of cases) expect(describeHolder(holder)).toBe(text);
  });
});
