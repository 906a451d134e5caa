// FileLock fencing tokens where a FileLock hands them out from a block it reserved in the lock
// file: they keep increasing for its own grants, past the end of a block, and another FileLock
// on the same file (another process) always gets a greater one. The clock is held still, so the
// clock floor cannot hide a reused token.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { manualClock } from '@rigging/core';
import { afterEach, describe, expect, it } from 'vitest';
import { FileLock } from '../src/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function pair() {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-locks-tokens-'));
  dirs.push(dir);
  const clock = manualClock(Date.UTC(2026, 10, 25));
  return [new FileLock({ dir, clock }), new FileLock({ dir, clock })] as const;
}

describe('FileLock fencing tokens on a still clock', () => {
  it('one FileLock: strictly increasing across 1,100 grants of a key (past a reserved block)', async () => {
    const [a, b] = pair();
    let last = -1n;
    for (let i = 0; i < 1_100; i++) {
      const lease = await a.acquire('k');
      expect(lease.token).toBeGreaterThan(last);
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
