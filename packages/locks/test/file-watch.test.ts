// The timers a FileLock runs over the leases it holds: `since` written into the record of an
// exclusive lease held 50 ms (for holder()), and the check that each lease's file is still the
// one it locked. One timer of each kind for all leases, none once nothing is held. A manual
// clock, so that only the test moves time. About a tenth of a second for the file.
import { realpathSync, mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { manualClock } from '@rigging/core';
import { afterEach, describe, expect, it } from 'vitest';
import { FileLock } from '../src/index.js';

const START = Date.UTC(2026, 10, 27);

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function setup(checkIntervalMs = 0) {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'rigging-locks-watch-')));
  dirs.push(dir);
  const clock = manualClock(START);
  const locks = new FileLock({ dir, clock, checkIntervalMs });
  return { dir, clock, locks };
}

describe('FileLock: since recorded for holder()', () => {
  it('records the since of each exclusive lease once it has been held 50 ms, each on its own schedule', async () => {
    const { clock, locks } = setup();
    const since = async (key: string) => (await locks.holder(key))?.since;
    const a = await locks.acquire('a');
    await clock.advance(30);
    const b = await locks.acquire('b');
    await clock.advance(10);
    const c = await locks.acquire('c');
    const s = await locks.acquire('s', { mode: 'shared' });
    await clock.advance(9);
    expect(await since('a')).toBe(START + 49); // young: the time of the question
    await clock.advance(1);
    expect(await since('a')).toBe(START);
    expect(await since('b')).toBe(START + 50);
    await clock.advance(29);
    expect(await since('b')).toBe(START + 79);
    await clock.advance(1);
    expect(await since('b')).toBe(START + 30);
    expect(await since('c')).toBe(START + 80);
    await clock.advance(10);
    expect(await since('c')).toBe(START + 40);
    // a shared grant records its since itself, and nothing overwrites it
    expect(await locks.holder('s')).toMatchObject({ mode: 'shared', since: START + 40 });
    for (const lease of [a, b, c, s]) await lease.release();
    expect(clock.pendingSleeps).toBe(0);
  });

  it('runs one since timer for all exclusive leases, none for shared ones, and none once they are recorded', async () => {
    const { clock, locks } = setup();
    const shared = await locks.acquire('s', { mode: 'shared' });
    expect(clock.pendingSleeps).toBe(0);
    const leases = [await locks.acquire('a'), await locks.acquire('b'), await locks.acquire('c')];
    expect(clock.pendingSleeps).toBe(1);
    await clock.advance(50);
    expect(clock.pendingSleeps).toBe(0);
    leases.push(await locks.acquire('d'));
    expect(clock.pendingSleeps).toBe(1);
    for (const lease of [shared, ...leases]) await lease.release();
    await clock.advance(50); // the timer fires with nothing held and stops
    expect(clock.pendingSleeps).toBe(0);
  });
});

describe('FileLock: held leases checked every checkIntervalMs', () => {
  it('marks a lease lost at the first check after its file is removed or replaced, and only that one', async () => {
    const { dir, clock, locks } = setup(100);
    const a = await locks.acquire('a', { mode: 'shared' });
    const b = await locks.acquire('b');
    const c = await locks.acquire('c');
    await clock.advance(60);
    unlinkSync(locks.pathOf('a'));
    writeFileSync(join(dir, 'new'), '');
    renameSync(join(dir, 'new'), locks.pathOf('b'));
    await clock.advance(39);
    expect([a.lost.aborted, b.lost.aborted, c.lost.aborted]).toEqual([false, false, false]);
    await clock.advance(1);
    expect([a.lost.aborted, b.lost.aborted, c.lost.aborted]).toEqual([true, true, false]);
    expect((a.lost.reason as Error).message).toMatch(
      /was lost: lock file was removed or replaced$/,
    );
    await clock.advance(100);
    expect(c.lost.aborted).toBe(false);
    for (const lease of [a, b, c]) await lease.release();
  });

  it('runs one checker for all leases, which stops once nothing is held', async () => {
    const { clock, locks } = setup(100);
    const a = await locks.acquire('a', { mode: 'shared' });
    expect(clock.pendingSleeps).toBe(1);
    const b = await locks.acquire('b', { mode: 'shared' });
    expect(clock.pendingSleeps).toBe(1);
    await a.release();
    await clock.advance(100);
    expect(clock.pendingSleeps).toBe(1); // b still held
    await b.release();
    await clock.advance(100);
    expect(clock.pendingSleeps).toBe(0);
    // and starts again with the next grant
    const c = await locks.acquire('c', { mode: 'shared' });
    unlinkSync(locks.pathOf('c'));
    await clock.advance(100);
    expect(c.lost.aborted).toBe(true);
    await c.release();
  });

  it('with checkIntervalMs 0 nothing checks; close() stops the timers and the leases stay held', async () => {
    const { clock, locks } = setup(0);
    const a = await locks.acquire('a', { mode: 'shared' });
    expect(clock.pendingSleeps).toBe(0);
    unlinkSync(locks.pathOf('a'));
    await clock.advance(10_000);
    expect(a.lost.aborted).toBe(false);
    await a.release();

    const watched = setup(100);
    const b = await watched.locks.acquire('b');
    expect(watched.clock.pendingSleeps).toBe(2);
    watched.locks.close();
    expect(watched.clock.pendingSleeps).toBe(0);
    unlinkSync(watched.locks.pathOf('b'));
    await watched.clock.advance(1000);
    expect(b.lost.aborted).toBe(false);
    expect(await watched.locks.holder('b')).toBeUndefined(); // the path names no file now
    await b.release();
  });
});
