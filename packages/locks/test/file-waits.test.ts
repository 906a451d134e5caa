// FileLock's waits inside one process: the waiters of a key queue behind one poller and go first,
// a waiter that times out or is aborted leaves the queue at once, and a key that is done with
// leaves nothing behind in the provider. A second FileLock on the same directory stands for
// another process; a manual clock holds the poller's backoff still, so that only a release of
// this FileLock, a departing waiter or the clock can move it. About half a second for the file.
import {
  closeSync,
  constants as fsConstants,
  openSync,
  readFileSync,
  renameSync,
  realpathSync,
  mkdtempSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RiggingError, manualClock, type Lease } from '@rigging/core';
import { afterEach, describe, expect, it } from 'vitest';
import { fsx, LOCK_BYTE } from './lock-bytes.js';
import { openFiles } from './open-files.js';
import { FileLock } from '../src/index.js';

const START = Date.UTC(2026, 10, 27);

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** `locks` retries at most once a second (±25 %): on the manual clock, only a wake moves it. */
function setup(options: { maxIdleFds?: number; checkIntervalMs?: number } = {}) {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'rigging-locks-waits-')));
  dirs.push(dir);
  const clock = manualClock(START);
  const locks = new FileLock({
    dir,
    clock,
    pollMinMs: 1000,
    pollMaxMs: 1000,
    checkIntervalMs: 0, // no timers on the clock but the waits'
    ...options,
  });
  // another descriptor, as another process would have
  const other = new FileLock({ dir, clock, checkIntervalMs: 0 });
  return { dir, clock, locks, other };
}

/** Lets promise callbacks and immediates run, without moving the manual clock. */
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

function track<T>(p: Promise<T>, order: string[], name: string): Promise<T> {
  return p.then((value) => {
    order.push(name);
    return value;
  });
}

/** The counter at the head of the lock file: it changes when a grant reads and reserves anew. */
function counterOf(path: string): string {
  return readFileSync(path, 'utf8').split('\n')[0]!;
}

/** Holds `path`'s lock byte on a descriptor of its own, writing nothing; returns the release. */
function holdByHand(path: string): () => void {
  const fd = openSync(path, fsConstants.O_RDWR | fsConstants.O_CREAT);
  expect(fsx.tryLock(fd, LOCK_BYTE, 1, { shared: false })).toBe(true);
  return () => {
    fsx.unlock(fd, LOCK_BYTE, 1);
    closeSync(fd);
  };
}

describe('FileLock waiters of one process', () => {
  it('a queued waiter goes before a later acquire, tryAcquire or tryNow of the same process', async () => {
    const { clock, locks, other } = setup();
    const order: string[] = [];
    const held = await other.acquire('k');
    const first = track(locks.acquire('k'), order, 'first');
    await settle();
    await held.release(); // frees the file; this FileLock's poller sleeps on
    expect(await locks.tryAcquire('k')).toBeUndefined();
    expect(await locks.tryAcquire('k', { mode: 'shared' })).toBeUndefined();
    expect(locks.tryNow('k', 'exclusive', clock.now())).toBeUndefined();
    const second = track(locks.acquire('k'), order, 'second');
    await settle();
    expect(order).toEqual([]);
    await clock.advance(1250); // the poller's next try
    const a = await first;
    await settle();
    expect(order).toEqual(['first']);
    await a.release(); // a release of this FileLock wakes the poller for the next waiter
    const b = await second;
    expect(order).toEqual(['first', 'second']);
    await b.release();
    // with nobody queued, the tries take the free lock at once
    const t = await locks.tryAcquire('k');
    expect(t).toBeDefined();
    await t!.release();
    const n = locks.tryNow('k', 'shared', clock.now());
    expect(n?.mode).toBe('shared');
    await n!.release();
  });

  it('the waiters of a key share one poller, and it takes them in order', async () => {
    const { clock, locks, other } = setup();
    const held = await other.acquire('k');
    const order: string[] = [];
    const waits = [track(locks.acquire('k'), order, 'a')];
    await settle();
    const sleeps = clock.pendingSleeps;
    waits.push(track(locks.acquire('k'), order, 'b'), track(locks.acquire('k'), order, 'c'));
    await settle();
    expect(clock.pendingSleeps).toBe(sleeps); // one backoff for the three of them
    await held.release();
    await clock.advance(1250);
    for (const wait of waits) await (await wait).release();
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it("a lease its poller granted stays the key's: a later waiter gets it at its release, and it is watched for loss", async () => {
    const { clock, locks, other } = setup({ checkIntervalMs: 10 });
    const held = await other.acquire('k');
    const waiting = locks.acquire('k');
    await settle();
    await held.release();
    await clock.advance(1250); // the poller's next try takes it, with no other waiter queued
    const first = await waiting;
    const order: string[] = [];
    const next = track(locks.acquire('k'), order, 'next');
    await settle();
    expect(order).toEqual([]);
    await first.release();
    await settle();
    expect(order).toEqual(['next']); // handed over at the release, no backoff waited
    const second = await next;
    unlinkSync(locks.pathOf('k'));
    await clock.advance(20);
    expect(second.lost.aborted).toBe(true);
    await second.release();
  });

  it('an aborted waiter leaves the queue at once: the next one is granted with no time passing', async () => {
    const { locks, other } = setup();
    const held = await other.acquire('k');
    const abort = new AbortController();
    const a = locks.acquire('k', { signal: abort.signal });
    const order: string[] = [];
    const b = track(locks.acquire('k'), order, 'b');
    await settle();
    await held.release();
    abort.abort(new Error('gone'));
    const e = await a.catch((error: unknown) => error);
    expect(RiggingError.hasCode(e, 'locks.aborted')).toBe(true);
    await settle();
    expect(order).toEqual(['b']);
    await (await b).release();
  });

  it('a waiter that times out leaves the queue at once, and the lock is not taken for it later', async () => {
    const { clock, locks, other } = setup();
    let held = await other.acquire('k');
    const order: string[] = [];
    const a = locks.acquire('k', { timeoutMs: 10 }).catch((error: unknown) => error);
    const b = track(locks.acquire('k'), order, 'b');
    await settle();
    await held.release();
    await clock.advance(10); // a's timeout; the poller's backoff has far to go
    expect(RiggingError.hasCode(await a, 'locks.timeout')).toBe(true);
    await settle();
    expect(order).toEqual(['b']);
    await (await b).release();

    // alone in the queue: once it timed out, nobody of this process takes the lock
    held = await other.acquire('k');
    const c = locks.acquire('k', { timeoutMs: 10 }).catch((error: unknown) => error);
    await clock.advance(10);
    expect(RiggingError.hasCode(await c, 'locks.timeout')).toBe(true);
    await held.release();
    await clock.advance(5000);
    const again = await other.tryAcquire('k');
    expect(again).toBeDefined();
    await again!.release();
  });

  it('tells lock:waiting listeners who holds the key, once per wait', async () => {
    const { clock, locks, other } = setup();
    const waiting: unknown[] = [];
    locks.events.on('lock:waiting', (e) => waiting.push(e));
    const held = await other.acquire('k');
    const w = locks.acquire('k');
    await settle();
    expect(waiting).toEqual([
      {
        provider: 'file',
        key: 'k',
        mode: 'exclusive',
        holder: { mode: 'exclusive', since: START, pid: process.pid, host: expect.any(String) },
        since: START,
      },
    ]);
    await held.release();
    await clock.advance(1250);
    await (await w).release();
    expect(waiting).toHaveLength(1);
  });
});

describe('FileLock keys done with', () => {
  // What a FileLock keeps for a key it neither holds, waits for nor keeps a descriptor of is
  // forgotten (memory stays bounded over many keys); the token cache goes with it, so the next
  // grant reads the counter from the file and reserves anew, which rewrites it. A key kept
  // (for its descriptor) takes the next reserved token and writes nothing. The lock is held
  // by hand here, on a descriptor of its own, so that nothing else writes the file.
  it('with maxIdleFds 0 a released key is forgotten: its next grant reads the file again', async () => {
    const { locks } = setup({ maxIdleFds: 0 });
    const path = locks.pathOf('k');
    await (await locks.acquire('k')).release();
    const counter = counterOf(path);
    await (await locks.acquire('k')).release();
    expect(counterOf(path)).not.toBe(counter);
  });

  it('a key kept for its descriptor is remembered until evicted past maxIdleFds', async () => {
    const { locks } = setup({ maxIdleFds: 1 });
    const [a, b] = [locks.pathOf('a'), locks.pathOf('b')];
    await (await locks.acquire('a')).release();
    const counterA = counterOf(a);
    await (await locks.acquire('a')).release();
    expect(counterOf(a)).toBe(counterA); // remembered: the next reserved token, nothing written
    await (await locks.acquire('b')).release(); // evicts a
    const counterB = counterOf(b);
    await (await locks.acquire('b')).release();
    expect(counterOf(b)).toBe(counterB);
    await (await locks.acquire('a')).release();
    expect(counterOf(a)).not.toBe(counterA);
  });

  it('with maxIdleFds 0, a wait that times out or a busy tryAcquire or tryNow keeps no descriptor', async () => {
    const { dir, clock, locks } = setup({ maxIdleFds: 0 });
    const path = locks.pathOf('k');
    await (await locks.acquire('k')).release();
    for (const busy of [
      async () => {
        const wait = locks.acquire('k', { timeoutMs: 10 }).catch((error: unknown) => error);
        await clock.advance(10);
        expect(RiggingError.hasCode(await wait, 'locks.timeout')).toBe(true);
      },
      async () => expect(await locks.tryAcquire('k')).toBeUndefined(),
      async () => expect(locks.tryNow('k', 'exclusive', clock.now())).toBeUndefined(),
    ]) {
      const unblock = holdByHand(path);
      await busy();
      await settle();
      unblock();
      expect(openFiles(dir)).toEqual([]);
    }
  });

  it('a wait whose try fails is rejected with the error', async () => {
    const { dir, clock, locks } = setup();
    const unblock = holdByHand(locks.pathOf('k'));
    const wait = locks.acquire('k').catch((error: unknown) => error);
    await settle();
    // the directory moves away and a file takes its name: the next try's stat fails
    renameSync(dir, `${dir}.old`);
    dirs.push(`${dir}.old`);
    writeFileSync(dir, '');
    unblock();
    await clock.advance(1250);
    expect(await wait).toMatchObject({ code: 'ENOTDIR' });
  });

  it('only keys with nothing held or awaited take a place among the maxIdleFds kept', async () => {
    const { clock, locks } = setup({ maxIdleFds: 1, checkIntervalMs: 10 });
    const a = locks.pathOf('a');
    const regrantKeepsA = async () => {
      const counter = counterOf(a);
      await (await locks.acquire('a')).release();
      return counterOf(a) === counter;
    };
    await (await locks.acquire('a')).release();
    expect(await regrantKeepsA()).toBe(true);

    // a key still held (one of two shared leases released): a stays the one kept
    const s1 = await locks.acquire('s', { mode: 'shared' });
    const s2 = await locks.acquire('s', { mode: 'shared' });
    await s1.release();
    expect(await regrantKeepsA()).toBe(true);
    await s2.release(); // now s is the one kept, and a is forgotten
    expect(await regrantKeepsA()).toBe(false);

    // a key still awaited (a waiter timed out, another waits)
    const unblock = holdByHand(locks.pathOf('w'));
    const w1 = locks.acquire('w', { timeoutMs: 10 }).catch((error: unknown) => error);
    const w2 = locks.acquire('w');
    await clock.advance(10);
    expect(RiggingError.hasCode(await w1, 'locks.timeout')).toBe(true);
    expect(await regrantKeepsA()).toBe(true);
    unblock();
    await clock.advance(1250);
    await (await w2).release();
    expect(await regrantKeepsA()).toBe(false);

    // a key whose lease was lost keeps no descriptor, and no place
    const lost = await locks.acquire('l');
    expect(await regrantKeepsA()).toBe(true);
    unlinkSync(locks.pathOf('l'));
    await clock.advance(10);
    expect(lost.lost.aborted).toBe(true);
    await lost.release();
    expect(await regrantKeepsA()).toBe(true);
  });

  it('two shared leases of one key keep one descriptor for the next grant', async () => {
    const { dir, locks } = setup();
    const one = await locks.acquire('k', { mode: 'shared' });
    const two = await locks.acquire('k', { mode: 'shared' });
    expect(openFiles(dir)).toHaveLength(2);
    await one.release();
    await two.release();
    expect(openFiles(dir)).toEqual([locks.pathOf('k')]);
    locks.close();
    expect(openFiles(dir)).toEqual([]);
  });

  it('names FileLock in the error of a timeout it refuses', async () => {
    const { locks } = setup();
    await expect(locks.acquire('k', { timeoutMs: -1 })).rejects.toThrow(/^FileLock/);
  });

  it('checkKey accepts the keys acquire accepts, remembered or not', async () => {
    const { locks } = setup();
    expect(() => locks.checkKey('')).toThrow(TypeError);
    expect(() => locks.checkKey('\ud800')).toThrow(TypeError);
    expect(() => locks.checkKey('fresh')).not.toThrow();
    const lease = await locks.acquire('k');
    expect(() => locks.checkKey('k')).not.toThrow();
    await lease.release();
  });
});

describe('FileLock lock directory', () => {
  it('creates a missing directory at the first grant, and again when it was removed', async () => {
    const parent = realpathSync(mkdtempSync(join(tmpdir(), 'rigging-locks-dir-')));
    dirs.push(parent);
    const dir = join(parent, 'a', 'b');
    const locks = new FileLock({ dir, maxIdleFds: 0 });
    expect(() => statSync(dir)).toThrow();
    await (await locks.acquire('k')).release();
    expect(statSync(locks.pathOf('k')).isFile()).toBe(true);
    rmSync(join(parent, 'a'), { recursive: true });
    const lease: Lease | undefined = await locks.tryAcquire('k');
    expect(lease).toBeDefined();
    expect(statSync(locks.pathOf('k')).isFile()).toBe(true);
    await lease!.release();
  });

  it('a directory that cannot be created fails the acquire and the tries, as rejections', async () => {
    const parent = realpathSync(mkdtempSync(join(tmpdir(), 'rigging-locks-dir-')));
    dirs.push(parent);
    writeFileSync(join(parent, 'file'), '');
    const locks = new FileLock({ dir: join(parent, 'file', 'locks') });
    await expect(locks.acquire('k')).rejects.toMatchObject({ code: 'ENOTDIR' });
    await expect(locks.tryAcquire('k')).rejects.toMatchObject({ code: 'ENOTDIR' });
    expect(() => locks.tryNow('k', 'exclusive', 0)).toThrow(
      expect.objectContaining({ code: 'ENOTDIR' }),
    );
  });
});
