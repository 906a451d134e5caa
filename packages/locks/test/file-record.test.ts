// What FileLock's grants and releases leave behind, read directly: the record in the lock file
// (counter, mode, holders), what holder() says after each transition, whether the lock byte is
// free for another descriptor, and which descriptors this process keeps open (/proc/self/fd).
// One process, a still clock where time matters: about a second for the whole file.
import {
  closeSync,
  constants as fsConstants,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { manualClock } from '@rigging/core';
import { afterEach, describe, expect, it } from 'vitest';
import { fsx, LOCK_BYTE, RECORD_BYTE } from './lock-bytes.js';
import { openFiles } from './open-files.js';
import { FileLock } from '../src/index.js';

const START = Date.UTC(2026, 10, 27);

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function setup(options: { maxIdleFds?: number; checkIntervalMs?: number } = {}) {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'rigging-locks-record-')));
  dirs.push(dir);
  const clock = manualClock(START);
  const locks = new FileLock({ dir, clock, ...options });
  const other = new FileLock({ dir, clock }); // another descriptor, as another process would have
  return { dir, clock, locks, other };
}

interface Holder {
  pid: number;
  host: string;
  since: number;
  token?: string;
}

/** The lock file's record: `<counter>\n<JSON>\n`, then a hole. */
function recordOf(path: string): { counter: bigint; mode: string; holders: Holder[] } {
  const [counter, json] = readFileSync(path, 'utf8').split('\n');
  const { mode, holders } = JSON.parse(json!) as { mode: string; holders: Holder[] };
  return { counter: BigInt(counter!), mode, holders };
}

/** True when no descriptor of anyone holds the lock byte: a fresh descriptor can take it. */
function lockIsFree(path: string): boolean {
  const fd = openSync(path, fsConstants.O_RDWR);
  try {
    return fsx.tryLock(fd, LOCK_BYTE, 1, { shared: false });
  } finally {
    closeSync(fd); // closing drops the probe's lock
  }
}

/**
 * Holds the byte shared holders lock while they rewrite the record, as a holder mid-update would
 * (exclusively), or as a reader might (shared): either way no one else may rewrite it meanwhile.
 */
function holdRecordByte(path: string, shared = false): () => void {
  const fd = openSync(path, fsConstants.O_RDWR);
  expect(fsx.tryLock(fd, RECORD_BYTE, 1, { shared })).toBe(true);
  return () => closeSync(fd);
}

function settledFlag(p: Promise<unknown>): { done: boolean } {
  const flag = { done: false };
  void p.then(() => {
    flag.done = true;
  });
  return flag;
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('FileLock release: what it leaves in the lock file', () => {
  it('an exclusive release frees the lock, and holder() follows every transition', async () => {
    const { locks, other, clock } = setup();
    const path = locks.pathOf('k');
    expect(await other.holder('k')).toBeUndefined();
    const a = await locks.acquire('k');
    expect(lockIsFree(path)).toBe(false);
    await clock.advance(5);
    expect(await other.holder('k')).toEqual({
      mode: 'exclusive',
      pid: process.pid,
      host: hostname(),
      since: START + 5, // not recorded yet: the time of the question
    });
    expect(recordOf(path)).toMatchObject({
      mode: 'exclusive',
      holders: [{ pid: process.pid, since: 0 }],
    });
    await a.release();
    expect(lockIsFree(path)).toBe(true);
    expect(await other.holder('k')).toBeUndefined();
    expect(await locks.holder('k')).toBeUndefined();
    locks.close();
    other.close();
  });

  it('a release clears the since it recorded, so a fast re-grant does not inherit it', async () => {
    const { locks, other, clock } = setup();
    const path = locks.pathOf('k');
    const a = await locks.acquire('k');
    await clock.advance(60); // past the delay after which a holder records its grant time
    expect(recordOf(path).holders).toEqual([{ pid: process.pid, host: hostname(), since: START }]);
    expect(await other.holder('k')).toMatchObject({ since: START });
    await a.release();
    expect(recordOf(path).holders).toEqual([{ pid: process.pid, host: hostname(), since: 0 }]);
    // the next grant takes a token reserved in the file and writes nothing
    const b = await locks.acquire('k');
    expect(b.token).toBe(a.token + 1n);
    expect(await other.holder('k')).toMatchObject({ mode: 'exclusive', since: START + 60 });
    await b.release();
    locks.close();
    other.close();
  });

  it('a shared release removes only its own holder, and the last one leaves none', async () => {
    const { locks, other } = setup();
    const path = locks.pathOf('k');
    const s1 = await locks.acquire('k', { mode: 'shared' });
    const s2 = await locks.acquire('k', { mode: 'shared' });
    const s3 = await other.acquire('k', { mode: 'shared' });
    const tokens = (holders: Holder[]) => holders.map((h) => h.token);
    const rec = recordOf(path);
    expect(rec.mode).toBe('shared');
    expect(rec.counter).toBe(s3.token);
    expect(tokens(rec.holders)).toEqual([s1, s2, s3].map((s) => s.token.toString()));
    await s2.release();
    expect(tokens(recordOf(path).holders)).toEqual([s1.token.toString(), s3.token.toString()]);
    expect(await other.holder('k')).toMatchObject({ mode: 'shared', count: 2, since: START });
    expect(lockIsFree(path)).toBe(false);
    await s1.release();
    await s3.release();
    expect(recordOf(path)).toEqual({ counter: s3.token, mode: 'shared', holders: [] });
    expect(lockIsFree(path)).toBe(true);
    expect(await other.holder('k')).toBeUndefined();
    locks.close();
    other.close();
  });

  it('a shared release with the record free completes at once, with no time passing', async () => {
    const { locks, other } = setup();
    const s = await locks.acquire('k', { mode: 'shared' });
    const released = settledFlag(s.release());
    await turn();
    expect(released.done).toBe(true);
    expect(lockIsFree(locks.pathOf('k'))).toBe(true);
    locks.close();
    other.close();
  });

  for (const held of ['exclusively', 'shared'] as const) {
    it(`a shared release that finds the record byte held ${held} keeps the lock and retries every millisecond`, async () => {
      const { locks, other, clock } = setup();
      const path = locks.pathOf('k');
      const s = await locks.acquire('k', { mode: 'shared' });
      const free = holdRecordByte(path, held === 'shared');
      const released = settledFlag(s.release());
      for (let ms = 0; ms < 5; ms++) {
        await clock.advance(1);
        expect(released.done).toBe(false);
        // still held, still recorded: no exclusive holder may start while the record names us
        expect(await other.tryAcquire('k')).toBeUndefined();
        expect(recordOf(path).holders.map((h) => h.token)).toEqual([s.token.toString()]);
      }
      free();
      await clock.advance(1);
      expect(released.done).toBe(true);
      expect(recordOf(path).holders).toEqual([]);
      const x = await other.tryAcquire('k');
      expect(x?.token).toBeGreaterThan(s.token);
      await x?.release();
      locks.close();
      other.close();
    });
  }

  it('a shared release waits at most 200 ms for a record that stays busy, then lets go', async () => {
    const { locks, other, clock } = setup();
    const path = locks.pathOf('k');
    const s = await locks.acquire('k', { mode: 'shared' });
    const free = holdRecordByte(path);
    const released = settledFlag(s.release());
    await clock.advance(100);
    expect(released.done).toBe(false);
    expect(lockIsFree(path)).toBe(false);
    await clock.advance(100);
    expect(released.done).toBe(true);
    expect(lockIsFree(path)).toBe(true);
    free();
    const x = await other.tryAcquire('k');
    expect(x?.token).toBeGreaterThan(s.token);
    await x?.release();
    locks.close();
    other.close();
  });

  it('a release hands over to a waiter of the same process at once, with no time passing', async () => {
    const { locks, other } = setup();
    for (const mode of ['exclusive', 'shared'] as const) {
      const a = await locks.acquire('k', { mode: 'exclusive' });
      const b = locks.acquire('k', { mode });
      const granted = settledFlag(b);
      await turn();
      expect(granted.done).toBe(false);
      await a.release();
      await turn();
      expect(granted.done).toBe(true);
      const lb = await b;
      expect(lb.token).toBeGreaterThan(a.token);
      await lb.release();
    }
    locks.close();
    other.close();
  });
});

describe('FileLock descriptors', () => {
  it('keeps one descriptor per released key for reuse, up to maxIdleFds, and close() closes them', async () => {
    const { dir, locks, other } = setup({ maxIdleFds: 2 });
    expect(openFiles(dir)).toEqual([]);
    const leases = [];
    for (const key of ['a', 'b', 'c']) leases.push(await locks.acquire(key));
    expect(openFiles(dir)).toEqual([locks.pathOf('a'), locks.pathOf('b'), locks.pathOf('c')]);
    for (const lease of leases) await lease.release();
    // the oldest idle key's descriptor goes first
    expect(openFiles(dir)).toEqual([locks.pathOf('b'), locks.pathOf('c')]);
    for (const key of ['a', 'b', 'c']) expect(lockIsFree(locks.pathOf(key))).toBe(true);
    // a shared lease's descriptor is kept as well
    await (await locks.acquire('a', { mode: 'shared' })).release();
    expect(openFiles(dir)).toEqual([locks.pathOf('a'), locks.pathOf('c')]);
    // a re-grant reuses the kept descriptor rather than opening another
    const again = await locks.acquire('c');
    expect(openFiles(dir)).toEqual([locks.pathOf('a'), locks.pathOf('c')]);
    await again.release();
    locks.close();
    expect(openFiles(dir)).toEqual([]);
    other.close();
  });

  it('with maxIdleFds 0 a release closes its descriptor', async () => {
    const { dir, locks, other } = setup({ maxIdleFds: 0 });
    for (const mode of ['exclusive', 'shared'] as const) {
      const lease = await locks.acquire('k', { mode });
      expect(openFiles(dir)).toEqual([locks.pathOf('k')]);
      await lease.release();
      expect(openFiles(dir)).toEqual([]);
    }
    locks.close();
    other.close();
  });

  it('holder() opens nothing that it leaves open, and takes nothing that it keeps', async () => {
    const { dir, locks, other } = setup();
    const a = await locks.acquire('k');
    await a.release();
    const before = openFiles(dir);
    expect(await other.holder('k')).toBeUndefined();
    expect(openFiles(dir)).toEqual(before);
    expect(lockIsFree(locks.pathOf('k'))).toBe(true);
    const s = await locks.acquire('k', { mode: 'shared' });
    expect(await other.holder('k')).toMatchObject({ mode: 'shared', count: 1 });
    expect(openFiles(dir)).toEqual(before);
    // the probe did not disturb the shared holder: another shared grant still comes in
    const s2 = await other.tryAcquire('k', { mode: 'shared' });
    expect(s2).toBeDefined();
    await s2?.release();
    await s.release();
    locks.close();
    other.close();
  });

  for (const mode of ['exclusive', 'shared'] as const) {
    it(`a lost ${mode} lease's descriptor is closed at release, never kept for the next grant`, async () => {
      const { dir, locks, clock } = setup({ checkIntervalMs: 10 });
      const path = locks.pathOf('k');
      const a = await locks.acquire('k', { mode });
      await clock.advance(60); // an exclusive lease has recorded its since by now
      unlinkSync(path);
      await clock.advance(10);
      expect(a.lost.aborted).toBe(true);
      const b = await locks.acquire('k');
      expect(b.token).toBeGreaterThan(a.token);
      await a.release();
      expect(openFiles(dir)).toEqual([path]); // b's, on the new file: none on the deleted one
      await b.release();
      expect(openFiles(dir)).toEqual([path]);
      expect(lockIsFree(path)).toBe(true);
      const c = await locks.acquire('k');
      expect(c.token).toBeGreaterThan(b.token);
      expect(lockIsFree(path)).toBe(false);
      await c.release();
      locks.close();
      expect(openFiles(dir)).toEqual([]);
    });
  }
});

describe('FileLock grants: the inode check and a busy record', () => {
  for (const how of ['removed', 'replaced'] as const) {
    it(`a kept descriptor whose file was ${how} meanwhile is dropped, and the grant locks the file at the path`, async () => {
      const { dir, locks, other } = setup();
      const path = locks.pathOf('k');
      const a = await locks.acquire('k');
      await a.release(); // its descriptor is kept for the next grant
      if (how === 'removed') unlinkSync(path);
      else {
        writeFileSync(`${path}.new`, '');
        renameSync(`${path}.new`, path);
      }
      const b = await locks.acquire('k');
      expect(b.token).toBeGreaterThan(a.token);
      expect(openFiles(dir)).toEqual([path]); // nothing left open on the old file
      expect(lockIsFree(path)).toBe(false);
      expect(await other.tryAcquire('k')).toBeUndefined();
      expect(recordOf(path)).toMatchObject({ mode: 'exclusive', holders: [{ pid: process.pid }] });
      await b.release();
      locks.close();
      other.close();
    });
  }

  for (const held of ['exclusively', 'shared'] as const) {
    it(`a shared grant that finds the record byte held ${held} takes nothing and is retried until it is free`, async () => {
      const { locks, other, clock } = setup();
      const path = locks.pathOf('k');
      await (await locks.acquire('k')).release(); // the file exists
      const free = holdRecordByte(path, held === 'shared');
      expect(await locks.tryAcquire('k', { mode: 'shared' })).toBeUndefined();
      expect(lockIsFree(path)).toBe(true); // the attempt let go of the lock byte
      const waiting = locks.acquire('k', { mode: 'shared' });
      const granted = settledFlag(waiting);
      await clock.advance(50);
      expect(granted.done).toBe(false);
      free();
      await clock.advance(25); // the poller's next try (backoff at most 16 ms + 25 %)
      expect(granted.done).toBe(true);
      const s = await waiting;
      expect(recordOf(path).holders.map((h) => h.token)).toEqual([s.token.toString()]);
      await s.release();
      locks.close();
      other.close();
    });
  }

  it('a shared grant drops the entries of dead holders on this host, and keeps those of other hosts', async () => {
    const { locks, other } = setup();
    const path = locks.pathOf('k');
    const dead = { pid: 2 ** 22 + 12345, host: hostname(), since: START - 10, token: '5' };
    const elsewhere = {
      pid: 2 ** 22 + 54321,
      host: `not-${hostname()}`,
      since: START - 5,
      token: '6',
    };
    mkdirSync(locks.dir, { recursive: true });
    writeFileSync(
      path,
      `${'6'.padStart(20, '0')}\n${JSON.stringify({ v: 1, mode: 'shared', holders: [dead, elsewhere] })}\n`,
    );
    const s = await locks.acquire('k', { mode: 'shared' });
    const { holders } = recordOf(path);
    expect(holders).toEqual([
      elsewhere,
      { pid: process.pid, host: hostname(), since: START, token: s.token.toString() },
    ]);
    await s.release();
    expect(recordOf(path).holders).toEqual([elsewhere]);
    locks.close();
    other.close();
  });
});

describe('FileLock holder()', () => {
  it('a lock taken by a process that wrote no record reads as exclusive, since unknown', async () => {
    const { locks } = setup();
    const path = locks.pathOf('k');
    mkdirSync(locks.dir, { recursive: true });
    writeFileSync(path, '');
    const fd = openSync(path, fsConstants.O_RDWR);
    expect(fsx.tryLock(fd, LOCK_BYTE, 1, { shared: false })).toBe(true);
    expect(await locks.holder('k')).toEqual({ mode: 'exclusive', since: 0 });
    fsx.unlock(fd, LOCK_BYTE, 1);
    expect(await locks.holder('k')).toBeUndefined();
    closeSync(fd);
    locks.close();
  });

  it('a record it cannot read tells only that the lock is held', async () => {
    const { locks } = setup();
    const counter = '7'.padStart(20, '0');
    const records = [
      'not json',
      'null',
      '{"v":2,"mode":"shared","holders":[{"pid":1,"host":"h","since":5}]}',
      '{"v":1,"mode":"shared","holders":"x"}',
      '{"v":1,"mode":"shared","holders":[]}',
    ];
    mkdirSync(locks.dir, { recursive: true });
    for (const [i, record] of records.entries()) {
      const path = locks.pathOf(`k${i}`);
      writeFileSync(path, `${counter}\n${record}\n`);
      const fd = openSync(path, fsConstants.O_RDWR);
      expect(fsx.tryLock(fd, LOCK_BYTE, 1, { shared: false })).toBe(true);
      expect(await locks.holder(`k${i}`)).toEqual({ mode: 'exclusive', since: 0 });
      closeSync(fd);
    }
    locks.close();
  });

  it('a wait that times out explains itself from the record and leaves no descriptor open', async () => {
    const { dir, locks, other, clock } = setup();
    const held = await other.acquire('k');
    const wait = locks.acquire('k', { timeoutMs: 10 }).catch((error: unknown) => error);
    await clock.advance(10);
    expect(String(await wait)).toMatch(new RegExp(`held exclusive by pid ${process.pid}`));
    // the holder's descriptor and the one kept for the next try: none for reading the record
    expect(openFiles(dir)).toEqual([locks.pathOf('k'), locks.pathOf('k')]);
    await held.release();
    locks.close();
    other.close();
  });

  it('a key never locked has no holder and gets no file; a path that cannot be opened is an error', async () => {
    const { locks } = setup();
    expect(await locks.holder('never')).toBeUndefined();
    expect(readdirSync(locks.dir)).toEqual([]);
    mkdirSync(locks.pathOf('dir'));
    await expect(locks.holder('dir')).rejects.toMatchObject({ code: 'EISDIR' });
    locks.close();
  });
});

describe('FileLock records of many shared holders', () => {
  it('a record past one page is read whole; past the record size a quarter of the holders is dropped, the oldest kept', async () => {
    const { locks, other, clock } = setup();
    const path = locks.pathOf('k');
    const leases = [];
    for (let i = 0; i < 60; i++) {
      leases.push(await locks.acquire('k', { mode: 'shared' }));
      await clock.advance(1);
    }
    expect(readFileSync(path, 'utf8').indexOf('\n', 21)).toBeGreaterThan(4096);
    expect(await other.holder('k')).toMatchObject({ mode: 'shared', count: 60, since: START });
    let count = 60;
    let cuts = 0;
    for (let i = 60; i < 400; i++) {
      leases.push(await locks.acquire('k', { mode: 'shared' }));
      await clock.advance(1);
      // a record cut to its size drops a quarter of the holders: holder() still counts most
      const now = (await other.holder('k'))!.count!;
      if (now < count) {
        cuts++;
        expect(now).toBeGreaterThan(count / 2);
      }
      count = now;
    }
    expect(cuts).toBeGreaterThan(0);
    const { holders, counter } = recordOf(path);
    expect(counter).toBe(leases.at(-1)!.token);
    expect(holders.length).toBeLessThan(400);
    expect(JSON.stringify(holders).length * 3).toBeLessThan(65536);
    expect(holders[0]!.since).toBe(START); // the oldest holder is kept: since stays the earliest
    expect(holders.at(-1)!.token).toBe(leases.at(-1)!.token.toString());
    expect(await other.holder('k')).toMatchObject({ count: holders.length, since: START });
    for (const lease of leases) await lease.release();
    expect(recordOf(path).holders).toEqual([]);
    expect(await other.holder('k')).toBeUndefined();
    locks.close();
    other.close();
  });
});
