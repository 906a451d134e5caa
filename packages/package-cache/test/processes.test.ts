import { existsSync } from 'node:fs';
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { PackageRef } from '../src/index.js';
import { tempDir } from './helpers.js';
import { Worker, fetchCount, type WorkerOptions } from './procs.js';

const ref = (id: string, version = '1.0.0', fqn = 'io.murano.App'): PackageRef => ({
  fqn,
  version,
  id,
});
const key = (r: PackageRef) => `${r.fqn}/${r.version}/${r.id}`;

interface Acquired {
  path: string;
  hit: boolean;
  manifest: string;
  blob: number;
}

let workers: Worker[] = [];
afterEach(async () => {
  await Promise.all(workers.map((w) => w.exit()));
  workers = [];
});

type Workers = Worker[] & { 0: Worker; 1: Worker; 2: Worker; 3: Worker };

async function start(
  n: number,
  options: Partial<WorkerOptions> & { root: string },
): Promise<Workers> {
  const ws = Array.from(
    { length: n },
    () => new Worker({ counter: join(options.root, 'fetches.log'), ...options }),
  );
  workers.push(...ws);
  await Promise.all(ws.map((w) => w.ready()));
  return ws as Workers;
}

// CI kills the downloader 5 times; SIGKILL_ROUNDS=40 (say) kills it that many times, the extra
// points random.
const ROUNDS = Math.max(5, Number(process.env.SIGKILL_ROUNDS ?? 5));

describe('several OS processes sharing one cache root', { timeout: 120_000 }, () => {
  it('16 concurrent acquires of one missing id across 4 processes: exactly 1 fetch, explained waits, remote progress', async () => {
    const root = await tempDir();
    const ws = await start(4, { root, chunks: 10, chunkDelayMs: 80, blobBytes: 64 * 1024 });
    const r = ref('one');
    const results = await Promise.all(
      ws.flatMap((w) => Array.from({ length: 4 }, () => w.send<Acquired>('acquire', { ref: r }))),
    );
    expect(await fetchCount(join(root, 'fetches.log'))).toBe(1);
    expect(new Set(results.map((x) => x.path)).size).toBe(1);
    for (const x of results) {
      expect(x.manifest).toBe(key(r));
      expect(x.blob).toBe(64 * 1024);
    }
    const downloader = Number((await readFile(join(root, 'fetches.log'), 'utf8')).split(' ')[0]);
    const others = ws.filter((w) => w.pid !== downloader);
    expect(others).toHaveLength(3);
    for (const w of others) {
      const waits = w.events('wait').filter((e) => e.lock === 'download');
      expect(waits.length).toBeGreaterThan(0);
      expect(waits.some((e) => e.pid === downloader)).toBe(true);
    }
    // Waiters in other processes saw the downloader's progress through its progress file.
    expect(others.some((w) => w.events('progress').some((e) => e.pid === downloader))).toBe(true);
  });

  it('re-upload with a new id while another process uses the old one: old path intact until released, then removed', async () => {
    const root = await tempDir();
    const [a, b] = await start(2, { root });
    const old = await a.send<Acquired>('acquire', { ref: ref('id1') });
    const fresh = await b.send<Acquired>('acquire', { ref: ref('id2') });
    expect(fresh.manifest).toBe(key(ref('id2')));
    // B could not take the old id's exclusive usage lock: the old package is untouched.
    expect(await readFile(join(old.path, 'manifest.txt'), 'utf8')).toBe(key(ref('id1')));
    expect((await stat(join(old.path, 'blob'))).size).toBe(4096);
    // Deleted upstream while in use: remove() refuses while A holds it.
    expect((await b.send<{ removed: boolean }>('remove', { ref: ref('id1') })).removed).toBe(false);
    // Listed as in use by another process, and outdated.
    const listed =
      await b.send<{ key: string; inUseElsewhere: boolean; outdated: boolean }[]>('entries');
    expect(listed.find((e) => e.key === key(ref('id1')))).toMatchObject({
      inUseElsewhere: true,
      outdated: true,
    });
    // Its last user releases it: A removes it right away (no download or prune needed).
    await a.send('release', { ref: ref('id1') });
    expect(existsSync(old.path)).toBe(false);
    expect(a.events('remove')).toContainEqual({
      event: 'remove',
      key: key(ref('id1')),
      reason: 'outdated',
    });
    const pruned = await b.send<{ removed: string[] }>('prune');
    expect(pruned.removed).toEqual([]);
    // The next downloader of that fqn/version removes the outdated ids nobody uses.
    await b.send('release', { ref: ref('id2') });
    await a.send('acquire', { ref: ref('id3') });
    expect(existsSync(fresh.path)).toBe(false);
    expect(
      a
        .events('remove')
        .map((e) => e.key)
        .sort(),
    ).toEqual([key(ref('id1')), key(ref('id2'))]);
    expect(await readdir(join(root, 'io.murano.App', '1.0.0'))).toEqual(
      expect.not.arrayContaining(['.id1.outdated', '.id2.outdated']),
    );
  });

  it('an outdated id held by two processes is removed by whichever releases it last', async () => {
    const root = await tempDir();
    const [a, b, c] = await start(3, { root });
    const old = await a.send<Acquired>('acquire', { ref: ref('v1') });
    await c.send<Acquired>('acquire', { ref: ref('v1') });
    await b.send<Acquired>('acquire', { ref: ref('v2') });
    expect(existsSync(old.path)).toBe(true);
    await a.send('release', { ref: ref('v1') }); // C still uses it
    expect(existsSync(old.path)).toBe(true);
    expect(await readFile(join(old.path, 'manifest.txt'), 'utf8')).toBe(key(ref('v1')));
    const seen =
      await a.send<{ key: string; inUseElsewhere: boolean; outdated: boolean }[]>('entries');
    expect(seen.find((e) => e.key === key(ref('v1')))).toMatchObject({
      inUseElsewhere: true,
      outdated: true,
    });
    await c.send('release', { ref: ref('v1') });
    expect(existsSync(old.path)).toBe(false);
    expect(c.events('remove').map((e) => [e.key, e.reason])).toEqual([
      [key(ref('v1')), 'outdated'],
    ]);
    expect(a.events('remove')).toEqual([]);
    // The current id is not outdated, and nobody holds what is left but B.
    const left =
      await a.send<{ key: string; inUseElsewhere: boolean; outdated: boolean }[]>('entries');
    expect(left).toEqual([
      {
        key: key(ref('v2')),
        bytes: expect.any(Number),
        leasesHere: 0,
        inUseElsewhere: true,
        inUse: true,
        outdated: false,
      },
    ]);
  });

  it('several versions in use at once by different processes; older versions go only when unused', async () => {
    const root = await tempDir();
    const [a, b, c] = await start(3, { root, olderVersions: 'remove' });
    const v1 = await a.send<Acquired>('acquire', { ref: ref('x', '1') });
    const v2 = await b.send<Acquired>('acquire', { ref: ref('y', '2') });
    expect(existsSync(v1.path)).toBe(true);
    await a.send('release', { ref: ref('x', '1') });
    const v3 = await c.send<Acquired>('acquire', { ref: ref('z', '3') });
    expect(existsSync(v1.path)).toBe(false); // unused: removed by the downloader of v3
    expect(existsSync(v2.path)).toBe(true); // in use by B: kept
    expect(await readFile(join(v2.path, 'manifest.txt'), 'utf8')).toBe(key(ref('y', '2')));
    expect(v3.manifest).toBe(key(ref('z', '3')));
  });

  it('byte cap with leases held in other processes: never evicts a held package, converges when released', async () => {
    const root = await tempDir();
    const [a, b, c] = await start(3, { root, blobBytes: 20_000, maxBytes: 50_000 });
    const held = [
      await a.send<Acquired>('acquire', { ref: ref('1', '1', 'p.a') }),
      await a.send<Acquired>('acquire', { ref: ref('1', '1', 'p.b') }),
      await b.send<Acquired>('acquire', { ref: ref('1', '1', 'p.c') }),
      await b.send<Acquired>('acquire', { ref: ref('1', '1', 'p.d') }),
    ];
    const r1 = await c.send<{ removed: string[]; bytes: number }>('prune');
    expect(r1.removed).toEqual([]);
    for (const h of held) expect((await stat(join(h.path, 'blob'))).size).toBe(20_000);
    expect(r1.bytes).toBeGreaterThan(50_000);
    for (const f of ['p.a', 'p.b']) await a.send('release', { ref: ref('1', '1', f) });
    for (const f of ['p.c', 'p.d']) await b.send('release', { ref: ref('1', '1', f) });
    const r2 = await c.send<{ removed: string[]; bytes: number }>('prune');
    expect(r2.bytes).toBeLessThanOrEqual(50_000);
    expect(r2.removed).toHaveLength(2);
  });

  it(
    'SIGKILL of the downloader at random points: no partial package ever visible, the next caller downloads once',
    async () => {
      const root = await tempDir();
      const counter = join(root, 'fetches.log');
      const chunks = 8;
      const [waiter] = await start(1, { root, chunks, chunkDelayMs: 15, blobBytes: 256 * 1024 });
      const points = [0, Math.floor(Math.random() * chunks), chunks - 1, -1, -1];
      while (points.length < ROUNDS) points.push(Math.floor(Math.random() * (chunks + 1)) - 1);
      for (const [i, point] of points.entries()) {
        const r = ref(`k${i}`);
        const victim = new Worker({
          root,
          counter,
          chunks,
          chunkDelayMs: 15,
          blobBytes: 256 * 1024,
        });
        workers.push(victim);
        await victim.ready();
        const dir = join(root, r.fqn, r.version, r.id);
        void victim.send('acquire', { ref: r }).catch(() => undefined);
        // Kill after chunk `point`, or (-1) after the last chunk, during extraction, fsync or rename.
        await victim.child.waitForLine(`"i":${point === -1 ? chunks - 1 : point},`, 30_000);
        const pending = waiter.send<Acquired>('acquire', { ref: r });
        await new Promise((res) => setTimeout(res, Math.floor(Math.random() * 20)));
        victim.kill();
        await victim.child.exited;
        // Visible means complete.
        if (existsSync(dir)) expect((await stat(join(dir, 'blob'))).size).toBe(256 * 1024);
        const got = await pending;
        expect(got.manifest).toBe(key(r));
        expect(got.blob).toBe(256 * 1024);
        const fetches = await fetchCount(counter, key(r));
        // The victim's attempt, then at most one more, by the waiter.
        expect(fetches).toBeLessThanOrEqual(2);
        const lines = (await readFile(counter, 'utf8'))
          .split('\n')
          .filter((l) => l.endsWith(` ${key(r)}`));
        expect(lines[0]!.startsWith(`${victim.pid} `)).toBe(true);
        if (lines[1]) expect(lines[1].startsWith(`${waiter.pid} `)).toBe(true);
        await waiter.send('release', { ref: r });
      }
      // A fresh process sweeps the dead downloaders' temp dirs and progress files.
      const [fresh] = await start(1, { root });
      await fresh.send('stats');
      const left = await readdir(join(root, '.tmp'));
      expect(left).toEqual([]);
    },
    120_000 + ROUNDS * 5_000,
  );
});
