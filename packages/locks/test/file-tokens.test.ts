// FileLock fencing tokens where a FileLock hands them out from a block it reserved in the lock
// file: they keep increasing for its own grants, past the end of a block, and another FileLock
// on the same file (another process) always gets a greater one. The clock is held still, so the
// clock floor cannot hide a reused token.
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { manualClock } from '@rigging/core';
import { afterEach, describe, expect, it } from 'vitest';
import { FileLock, TwoLevelLock } from '../src/index.js';

const START = Date.UTC(2026, 10, 25);
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-locks-tokens-'));
  dirs.push(dir);
  return dir;
}

function pair() {
  const dir = freshDir();
  const clock = manualClock(START);
  return [new FileLock({ dir, clock }), new FileLock({ dir, clock })] as const;
}

/** The counter in the first 20 bytes of a lock file. */
function counterOf(path: string): bigint {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(20);
    readSync(fd, buf, 0, 20, 0);
    return BigInt(buf.toString('latin1'));
  } finally {
    closeSync(fd);
  }
}

/** Writes a lock file by hand: `counter` in the first 20 bytes, then `rest`. */
function writeLockFile(locks: FileLock, key: string, counter: string, rest = '\n'): string {
  mkdirSync(locks.dir, { recursive: true });
  const path = locks.pathOf(key);
  writeFileSync(path, counter + rest);
  return path;
}

describe('FileLock fencing tokens on a still clock', () => {
  it('one FileLock: strictly increasing across 1,100 grants of a key (past a reserved block)', async () => {
    const [a, b] = pair();
    let last = -1n;
    for (let i = 0; i < 1_100; i++) {
      const lease = await a.acquire('k');
      expect(lease.token).toBeGreaterThan(last);
      // the counter in the file covers the token, within the block of 1,024 reserved with it
      const counter = counterOf(a.pathOf('k'));
      expect(counter).toBeGreaterThanOrEqual(lease.token);
      expect(counter - lease.token).toBeLessThan(1024n);
      last = lease.token;
      await lease.release();
    }
    // another FileLock on the same file comes after every one of them
    const other = await b.acquire('k');
    expect(other.token).toBeGreaterThan(last);
    await other.release();
    const back = await a.acquire('k');
    expect(back.token).toBeGreaterThan(other.token);
    await back.release();
    a.close();
    b.close();
  });

  it('shared holders of two FileLocks are recorded as shared, and exclusive comes after both', async () => {
    const [a, b] = pair();
    const s1 = await a.acquire('k', { mode: 'shared' });
    const s2 = await b.acquire('k', { mode: 'shared' });
    expect(s2.token).toBeGreaterThan(s1.token);
    expect(await a.holder('k')).toMatchObject({ mode: 'shared', count: 2 });
    await s1.release();
    expect(await b.holder('k')).toMatchObject({ mode: 'shared', count: 1 });
    await s2.release();
    const x = await a.acquire('k');
    expect(x.token).toBeGreaterThan(s2.token);
    expect(await b.holder('k')).toMatchObject({ mode: 'exclusive' });
    await x.release();
    a.close();
    b.close();
  });
});

describe('FileLock tokens from the counter in the file', () => {
  it('a re-grant of a key this FileLock wrote last takes the next reserved token and writes nothing', async () => {
    const [a, b] = pair();
    const first = await a.acquire('k');
    await first.release();
    const path = a.pathOf('k');
    const size = statSync(path).size;
    const counter = readFileSync(path, 'latin1').slice(0, 20);
    for (let i = 1; i <= 3; i++) {
      const lease = await a.acquire('k');
      expect(lease.token).toBe(first.token + BigInt(i));
      await lease.release();
    }
    expect(statSync(path).size).toBe(size);
    expect(readFileSync(path, 'latin1').slice(0, 20)).toBe(counter);
    // a write by another descriptor moves the size, so the block is not trusted any more
    const other = await b.acquire('k', { mode: 'shared' });
    await other.release();
    expect(statSync(path).size).not.toBe(size);
    const after = await a.acquire('k');
    expect(after.token).toBeGreaterThan(other.token);
    await after.release();
    // a FileLock that read the counter another one wrote reserves from it, then writes nothing
    const reserved = statSync(path).size;
    for (let i = 1; i <= 3; i++) {
      const lease = await a.acquire('k');
      expect(lease.token).toBe(after.token + BigInt(i));
      await lease.release();
    }
    expect(statSync(path).size).toBe(reserved);
    a.close();
    b.close();
  });

  it('two FileLocks taking turns in every mode order get increasing tokens', async () => {
    const [a, b] = pair();
    const steps = [
      [a, 'exclusive'],
      [b, 'exclusive'],
      [a, 'exclusive'],
      [b, 'shared'],
      [a, 'exclusive'],
      [b, 'shared'],
      [b, 'shared'],
      [a, 'exclusive'],
      [a, 'shared'],
      [b, 'exclusive'],
      [b, 'exclusive'],
      [a, 'exclusive'],
    ] as const;
    let last = 0n;
    for (let round = 0; round < 40; round++) {
      for (const [locks, mode] of steps) {
        const lease = await locks.acquire('k', { mode });
        expect(lease.token).toBeGreaterThan(last);
        last = lease.token;
        await lease.release();
      }
    }
    a.close();
    b.close();
  });

  it('tokens never go below the clock in microseconds, nor repeat one another FileLock gave', async () => {
    const dir = freshDir();
    const clock = manualClock(START);
    const floor = BigInt(START) * 1000n;
    const b = new FileLock({ dir, clock });
    const shared = await b.acquire('fresh', { mode: 'shared' });
    expect(shared.token).toBeGreaterThanOrEqual(floor);
    await shared.release();
    // a FileLock that has granted nothing yet (another process), in the same millisecond
    const a = new FileLock({ dir, clock });
    const x = await a.acquire('fresh');
    expect(x.token).toBeGreaterThan(shared.token);
    await x.release();
    const y = await new FileLock({ dir, clock }).acquire('other');
    expect(y.token).toBeGreaterThanOrEqual(floor);
    await y.release();
    // the file is deleted by hand: a later process still comes after, by the clock alone
    unlinkSync(a.pathOf('fresh'));
    await clock.advance(2);
    for (const mode of ['exclusive', 'shared'] as const) {
      const c = new FileLock({ dir, clock });
      const later = await c.acquire(`fresh`, { mode });
      expect(later.token).toBeGreaterThan(x.token);
      expect(later.token).toBeGreaterThanOrEqual(floor + 2000n);
      await later.release();
      c.close();
      unlinkSync(a.pathOf('fresh'));
    }
    a.close();
    b.close();
  });

  it('a deleted lock file gets a token above the last one of its key, whatever other keys took meanwhile', async () => {
    const [a] = pair();
    const first = await a.acquire('a'); // reserves a block for key a
    await first.release();
    let last = 0n;
    for (let i = 0; i < 10; i++) {
      const lease = await a.acquire('b');
      last = lease.token;
      await lease.release();
    }
    // key a takes the next token of its own block: below what key b has reached
    const low = await a.acquire('a');
    expect(low.token).toBeLessThan(last);
    await low.release();
    unlinkSync(a.pathOf('b')); // key b's counter is gone; the clock stands still
    for (const mode of ['exclusive', 'shared'] as const) {
      const next = await a.acquire('b', { mode });
      expect(next.token).toBeGreaterThan(last);
      last = next.token;
      await next.release();
      unlinkSync(a.pathOf('b'));
    }
    a.close();
  });

  it('past 2^53 tokens stay exact: each grant takes the counter plus one', async () => {
    const [a, b] = pair();
    const start = 2n ** 53n - 100n;
    writeLockFile(a, 'k', start.toString().padStart(20, '0'));
    let expected = start;
    for (let i = 0; i < 200; i++) {
      const locks = i % 50 === 49 ? b : a;
      const lease = await locks.acquire('k', { mode: i % 7 === 3 ? 'shared' : 'exclusive' });
      expected += 1n;
      expect(lease.token).toBe(expected);
      await lease.release();
    }
    const huge = 10n ** 20n - 10n; // 20 digits, far past 2^64
    writeLockFile(a, 'h', huge.toString());
    expected = huge;
    for (const mode of ['shared', 'exclusive', 'shared', 'exclusive'] as const) {
      const lease = await b.acquire('h', { mode });
      expect(lease.token).toBe(++expected);
      await lease.release();
    }
    a.close();
    b.close();
  });

  it('a damaged counter counts as none: the grant still comes, above the clock', async () => {
    const [a] = pair();
    const floor = BigInt(START) * 1000n;
    const damaged = ['9999999999999999999x', 'x9999999999999999999', '999999999-9999999999', '99'];
    let last = 0n;
    for (const [i, counter] of damaged.entries()) {
      for (const mode of ['exclusive', 'shared'] as const) {
        writeLockFile(a, `k${i}${mode}`, counter);
        const lease = await a.acquire(`k${i}${mode}`, { mode });
        expect(lease.token).toBeGreaterThanOrEqual(floor);
        expect(lease.token).toBeGreaterThan(last);
        expect(lease.token).toBeLessThan(floor + 10_000n);
        last = lease.token;
        await lease.release();
      }
    }
    a.close();
  });

  it('a counter padded with spaces by hand (printf %20s) is read by either grant: it and every later grant come after it', async () => {
    const counter = BigInt(START) * 1000n + 50_000_000n; // above the clock floor
    for (const field of [counter.toString().padStart(20), counter.toString().padEnd(20)]) {
      for (const mode of ['shared', 'exclusive'] as const) {
        const [a, b] = pair();
        const path = writeLockFile(a, 'k', field);
        const first = await a.acquire('k', { mode });
        expect(first.token).toBe(counter + 1n);
        expect(await b.holder('k')).toMatchObject({ mode });
        await first.release();
        // the grant wrote the counter back in digits: another FileLock's grant reads it
        expect(counterOf(path)).toBeGreaterThanOrEqual(first.token);
        const next = await b.acquire('k');
        expect(next.token).toBeGreaterThan(first.token);
        await next.release();
        a.close();
        b.close();
      }
    }
  });

  it("a new key's first token is the clock in microseconds, whatever counter this process read in another directory", async () => {
    const clock = manualClock(START);
    const floor = BigInt(START) * 1000n;
    const elsewhere = new FileLock({ dir: freshDir(), clock });
    const high = floor + 1_000_000_000n;
    writeLockFile(elsewhere, 'k', high.toString().padStart(20, '0'));
    const read = await elsewhere.acquire('k');
    expect(read.token).toBe(high + 1n);
    await read.release();
    // no lock file yet, or an empty one (its creator died before writing): nothing to count from
    for (const empty of [false, true]) {
      const locks = new FileLock({ dir: freshDir(), clock });
      if (empty) writeLockFile(locks, 'new', '', '');
      const lease = await locks.acquire('new');
      expect(lease.token).toBe(floor);
      await lease.release();
      locks.close();
    }
    elsewhere.close();
  });

  it('a lock file replaced by a copy with a higher counter (same size, same moment) is read again', async () => {
    const [a] = pair();
    const path = a.pathOf('k');
    let last = 0n;
    for (let i = 0; i < 50; i++) {
      const lease = await a.acquire('k');
      expect(lease.token).toBeGreaterThan(last);
      last = lease.token;
      await lease.release();
      const copy = readFileSync(path);
      const higher = last + 1_000_000n;
      copy.write(higher.toString().padStart(20, '0'), 0, 'latin1');
      writeFileSync(`${path}.new`, copy);
      renameSync(`${path}.new`, path);
      last = higher;
    }
    const lease = await a.acquire('k');
    expect(lease.token).toBeGreaterThan(last);
    await lease.release();
    a.close();
  });

  it('a lock file rewritten by hand with its size kept, and its mtime kept (a restore) or set back, is read again', async () => {
    const [a] = pair();
    const first = await a.acquire('k');
    await first.release();
    const path = a.pathOf('k');
    const { atime, mtime } = statSync(path);
    const { mtimeNs } = statSync(path, { bigint: true });
    await new Promise((resolve) => setTimeout(resolve, 20)); // a later change time
    const text = readFileSync(path);
    const higher = first.token + 10_000_000n;
    text.write(higher.toString().padStart(20, '0'), 0, 'latin1');
    writeFileSync(path, text);
    // the mtime put back to the nanosecond, as `cp -p` or a restore does (utimes takes less)
    const ns = (mtimeNs % 1_000_000_000n).toString().padStart(9, '0');
    execFileSync('touch', ['-m', '-d', `@${mtimeNs / 1_000_000_000n}.${ns}`, path]);
    expect(statSync(path, { bigint: true }).mtimeNs).toBe(mtimeNs);
    expect(statSync(path).size).toBe(text.length);
    const next = await a.acquire('k');
    expect(next.token).toBeGreaterThan(higher);
    await next.release();
    // at once this time, with only the mtime moved (a day back) besides the counter
    const again = readFileSync(path);
    const highest = next.token + 10_000_000n;
    again.write(highest.toString().padStart(20, '0'), 0, 'latin1');
    writeFileSync(path, again);
    utimesSync(path, atime, new Date(mtime.getTime() - 86_400_000));
    const last = await a.acquire('k');
    expect(last.token).toBeGreaterThan(highest);
    await last.release();
    a.close();
  });
});

describe('FileLock tokens when descriptors take turns or the file changes by hand', () => {
  it('keeps tokens strictly increasing when descriptors of one file take turns', async () => {
    const dir = freshDir();
    const locks = [new FileLock({ dir }), new FileLock({ dir }), new TwoLevelLock({ dir })];
    let last = -1n;
    let seed = 7;
    for (let i = 0; i < 1000; i++) {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      const runs = 1 + (seed % 5); // several grants in a row through one descriptor, then another
      const p = locks[seed % 3]!;
      for (let r = 0; r < runs; r++) {
        const lease = await p.acquire('k', { mode: seed % 11 === 0 ? 'shared' : 'exclusive' });
        expect(lease.token).toBeGreaterThan(last);
        last = lease.token;
        await lease.release();
      }
    }
    for (const l of locks) l.close();
  });

  it('a file written by hand meanwhile (same size) is read again, not trusted', async () => {
    const dir = freshDir();
    const locks = new FileLock({ dir });
    const a = await locks.acquire('k');
    await a.release();
    const path = locks.pathOf('k');
    const text = readFileSync(path);
    const higher = (a.token + 10_000_000n).toString().padStart(20, '0');
    text.write(higher, 0, 'latin1');
    writeFileSync(path, text); // same inode, same size, a higher counter
    const b = await locks.acquire('k');
    expect(b.token).toBeGreaterThan(a.token + 10_000_000n);
    await b.release();
    locks.close();
  });

  it('holder() gives since: the call time for a young exclusive lease, the grant time later', async () => {
    const dir = freshDir();
    const start = 1_700_000_000_000;
    const clock = manualClock(start);
    const locks = new FileLock({ dir, clock });
    const other = new FileLock({ dir, clock });
    const a = await locks.acquire('k');
    await clock.advance(10);
    const young = await other.holder('k');
    expect(young).toMatchObject({ mode: 'exclusive', pid: process.pid, since: start + 10 });
    await clock.advance(110); // past the recording delay: the holder wrote its grant time
    expect(await other.holder('k')).toMatchObject({ since: start });
    await a.release();
    expect(await other.holder('k')).toBeUndefined();
    // a fast re-grant does not inherit the old since
    const b = await locks.acquire('k');
    expect(b.token).toBeGreaterThan(a.token);
    expect((await other.holder('k'))?.since).toBe(start + 120);
    await b.release();
    locks.close();
    other.close();
  });
  it('a lock file replaced under its holder still gives the next holder a greater token, in the same millisecond', async () => {
    const dir = freshDir();
    const clock = manualClock(1_700_000_000_000); // time stands still: only the token logic orders
    const locks = new FileLock({ dir, clock });
    for (const mode of ['exclusive', 'shared'] as const) {
      for (const nextMode of ['exclusive', 'shared'] as const) {
        const first = await locks.acquire('k', { mode });
        unlinkSync(locks.pathOf('k')); // the counter is gone with the file
        // the FileLock's token source remembers what the file forgot
        const next = await locks.acquire('k', { mode: nextMode, timeoutMs: 20_000 });
        expect(next.token).toBeGreaterThan(first.token);
        await next.release();
        await first.release();
      }
    }
    locks.close();
  });
});
