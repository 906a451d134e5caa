import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, readlink, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { RiggingError, manualClock } from '@rigging/core';
import { PackageCache, type FetchedPackage, type PackageRef } from '../src/index.js';
import { memoryLockProvider } from '@rigging/locks';
import { sri, tarOf, tempDir, zipOf } from './helpers.js';

const ref = (id = 'a1', version = '1.0.0', fqn = 'io.murano.Apache'): PackageRef => ({
  fqn,
  version,
  id,
});

async function cacheWith(
  fetched: (r: PackageRef) => FetchedPackage | Promise<FetchedPackage>,
  extra = {},
) {
  const root = await tempDir();
  const calls: PackageRef[] = [];
  const cache = await PackageCache.open({
    root,
    fetch: async (r) => {
      calls.push(r);
      return fetched(r);
    },
    ...extra,
  });
  return { root, cache, calls };
}

const simpleTar = (text = 'hello') =>
  tarOf([
    { name: 'manifest.yaml', content: `name: ${text}\n` },
    { name: 'Classes/', type: '5' },
    { name: 'Classes/app.yaml', content: 'x: 1\n' },
    { name: 'link', type: '2', linkname: 'Classes/app.yaml' },
  ]);

async function leftovers(root: string): Promise<string[]> {
  return (await readdir(join(root, '.tmp'))).filter((n) => !n.startsWith('progress-'));
}

describe('PackageCache', () => {
  it('installs a tar buffer, then hits', async () => {
    const bytes = simpleTar();
    const { cache, calls, root } = await cacheWith(() => ({
      buffer: bytes,
      integrity: sri(bytes),
    }));
    {
      await using pkg = await cache.acquire(ref());
      expect(pkg.path).toBe(join(root, 'io.murano.Apache', '1.0.0', 'a1'));
      expect(pkg.hit).toBe(false);
      expect(pkg.integrity).toBe(sri(bytes));
      expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('name: hello\n');
      expect(await readlink(join(pkg.path, 'link'))).toBe('Classes/app.yaml');
      expect(pkg.size).toBeGreaterThan(0);
    }
    await using again = await cache.acquire(ref());
    expect(again.hit).toBe(true);
    expect(calls).toHaveLength(1);
    expect(cache.stats()).toMatchObject({ entries: 1, hits: 1, misses: 1, downloads: 1, inUse: 1 });
    expect(await leftovers(root)).toEqual([]);
  });

  it('a plain tar or tgz buffer (fast path) installs the same tree as streaming through node-tar', async () => {
    const files = tarOf([
      { name: 'manifest.yaml', content: 'name: fast\n' },
      { name: 'Classes/', type: '5', mode: 0o750 },
      { name: 'Classes/app.yaml', content: 'x: 1\n', mode: 0o600 },
      { name: 'bin/run.sh', content: '#!/bin/sh\n', mode: 0o755 },
      { name: 'empty', content: '' },
      { name: 'big', content: Buffer.alloc(300_000, 7) },
    ]);
    const gz = gzipSync(files);
    const dir = await tempDir();
    await writeFile(join(dir, 'pkg.tar'), files);
    await writeFile(join(dir, 'pkg.tgz'), gz);
    const { cache } = await cacheWith((r) => {
      const bytes = r.id.startsWith('gz') ? gz : files;
      if (r.id.endsWith('file'))
        return { path: join(dir, r.id.startsWith('gz') ? 'pkg.tgz' : 'pkg.tar') };
      if (r.id.endsWith('stream'))
        return {
          stream: (async function* () {
            for (let i = 0; i < bytes.length; i += 1000) yield bytes.subarray(i, i + 1000);
          })(),
        };
      return { buffer: bytes };
    });
    const tree = async (dir: string) => {
      const out: string[] = [];
      const walk = async (d: string, rel: string): Promise<void> => {
        for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) =>
          a.name.localeCompare(b.name),
        )) {
          const p = join(d, e.name);
          const st = await stat(p);
          const r = `${rel}${e.name}`;
          if (e.isDirectory()) {
            out.push(`${r}/ ${(st.mode & 0o777).toString(8)}`);
            await walk(p, `${r}/`);
          } else {
            const body = await readFile(p);
            out.push(
              `${r} ${(st.mode & 0o777).toString(8)} ${body.length} ${body.subarray(0, 12).toString('hex')} ${st.mtimeMs}`,
            );
          }
        }
      };
      await walk(dir, '');
      return out;
    };
    const trees: string[][] = [];
    for (const id of ['buf', 'stream', 'gz', 'gz-stream', 'file', 'gz-file']) {
      await using pkg = await cache.acquire(ref(id));
      trees.push(await tree(pkg.path));
    }
    expect(trees[0]).toContain('bin/run.sh 755 10 23212f62696e2f73680a 0');
    for (const t of trees.slice(1)) expect(t).toEqual(trees[0]);
  });

  it('accepts any LockProvider (here the in-process one, for a single process)', async () => {
    const bytes = simpleTar();
    const locks = memoryLockProvider();
    const { cache } = await cacheWith(() => ({ buffer: bytes }), { locks });
    const [a, b] = await Promise.all([cache.acquire(ref()), cache.acquire(ref())]);
    expect(a.path).toBe(b.path);
    await a.release();
    await b.release();
    expect(cache.stats().downloads).toBe(1);
  });

  it('streams a gzipped tar (sha256 integrity) and a web stream', async () => {
    const gz = gzipSync(simpleTar('gz'));
    const { cache } = await cacheWith((r) =>
      r.id === 'node'
        ? {
            stream: (async function* () {
              for (let i = 0; i < gz.length; i += 100) yield gz.subarray(i, i + 100);
            })(),
            integrity: sri(gz, 'sha256'),
          }
        : { stream: new Blob([gz]).stream(), integrity: sri(gz, 'sha256') },
    );
    for (const id of ['node', 'web']) {
      await using pkg = await cache.acquire(ref(id, '2.0'));
      expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('name: gz\n');
    }
  });

  it('installs zip archives (buffer, stream and file) and directories', async () => {
    const zip = zipOf([
      { name: 'dir/', mode: 0o040755 },
      { name: 'dir/run.sh', content: '#!/bin/sh\n', mode: 0o100755 },
      { name: 'ln', content: 'dir/run.sh', mode: 0o120777 },
    ]);
    const src = await tempDir('pc-src-');
    await writeFile(join(src, 'pkg.zip'), zip);
    await mkdir(join(src, 'tree', 'sub'), { recursive: true });
    await writeFile(join(src, 'tree', 'sub', 'f.txt'), 'tree');
    const { cache } = await cacheWith((r) =>
      r.id === 'buf'
        ? { buffer: zip }
        : r.id === 'stream'
          ? {
              stream: (async function* () {
                yield zip;
              })(),
            }
          : r.id === 'file'
            ? { path: join(src, 'pkg.zip'), integrity: sri(zip) }
            : { path: join(src, 'tree') },
    );
    for (const id of ['buf', 'stream', 'file']) {
      await using pkg = await cache.acquire(ref(id));
      expect(await readFile(join(pkg.path, 'dir', 'run.sh'), 'utf8')).toBe('#!/bin/sh\n');
      expect(await readlink(join(pkg.path, 'ln'))).toBe('dir/run.sh');
      expect(pkg.integrity).toBe(sri(zip));
    }
    await using tree = await cache.acquire(ref('dir'));
    expect(await readFile(join(tree.path, 'sub', 'f.txt'), 'utf8')).toBe('tree');
    expect(tree.integrity).toBeUndefined();
  });

  it('refuses invalid refs with package-cache.invalid_ref', async () => {
    const { cache, calls } = await cacheWith(() => ({ buffer: simpleTar() }));
    const bad: PackageRef[] = [
      ref('..'),
      ref('a/b'),
      ref('a\\b'),
      ref('a\0b'),
      ref(''),
      ref('x'.repeat(129)),
      ref('.hidden'),
      ref('ok', '../1'),
      ref('ok', '1', '..'),
      ref('ok', '1', 'a..b'),
      { fqn: 'a', version: 1 as unknown as string, id: 'x' },
    ];
    for (const r of bad) {
      const e = await cache.acquire(r).catch((x: unknown) => x);
      expect(RiggingError.hasCode(e, 'package-cache.invalid_ref'), JSON.stringify(r)).toBe(true);
    }
    expect(calls).toHaveLength(0);
  });

  it('integrityAlgorithm: computes sha256, or nothing with none; a given integrity is still checked', async () => {
    const bytes = simpleTar();
    const stream = () => ({
      stream: (async function* () {
        yield bytes;
      })(),
    });
    for (const [integrityAlgorithm, expected] of [
      ['sha256', sri(bytes, 'sha256')],
      ['sha512', sri(bytes)],
      ['none', undefined],
    ] as const) {
      const { cache } = await cacheWith((r) => (r.id === 'buf' ? { buffer: bytes } : stream()), {
        integrityAlgorithm,
      });
      for (const id of ['buf', 'stream']) {
        await using pkg = await cache.acquire(ref(id));
        expect(pkg.integrity).toBe(expected);
        expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('name: hello\n');
      }
      await cache.close();
    }
    const { cache } = await cacheWith(() => ({ buffer: bytes, integrity: sri(Buffer.from('x')) }), {
      integrityAlgorithm: 'none',
    });
    const e = await cache.acquire(ref()).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
    const root = await tempDir();
    expect(
      () =>
        // @ts-expect-error: not an algorithm
        new PackageCache({ root, fetch: () => Promise.resolve(bytes), integrityAlgorithm: 'md5' }),
    ).toThrow(/integrityAlgorithm must be .* got md5/);
  });

  it('integrity mismatch: package-cache.integrity_mismatch and nothing cached', async () => {
    const bytes = simpleTar();
    const zip = zipOf([{ name: 'a', content: 'a' }]);
    const { cache, root } = await cacheWith((r) =>
      r.id === 'zip'
        ? { buffer: zip, integrity: sri(Buffer.from('other')) }
        : {
            stream: (async function* () {
              yield bytes;
            })(),
            integrity: sri(Buffer.from('other'), 'sha256'),
          },
    );
    for (const id of ['tar', 'zip']) {
      const e = await cache.acquire(ref(id)).catch((x: unknown) => x);
      expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
      expect(existsSync(join(root, 'io.murano.Apache', '1.0.0', id))).toBe(false);
    }
    expect(await leftovers(root)).toEqual([]);
    expect(cache.stats()).toMatchObject({ entries: 0, downloads: 0 });
  });

  it('a multi-hash SRI whose strongest hash is wrong is refused end to end (no downgrade)', async () => {
    const bytes = simpleTar();
    const downgrade = `${sri(Buffer.from('other'), 'sha512')} ${sri(bytes, 'sha256')}`;
    const { cache, root } = await cacheWith((r) =>
      r.id === 'buf'
        ? { buffer: bytes, integrity: downgrade }
        : {
            stream: (async function* () {
              yield bytes;
            })(),
            integrity: downgrade,
          },
    );
    for (const id of ['buf', 'stream']) {
      const e = await cache.acquire(ref(id)).catch((x: unknown) => x);
      expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
      expect(existsSync(join(root, 'io.murano.Apache', '1.0.0', id))).toBe(false);
    }
    expect(cache.stats()).toMatchObject({ entries: 0, downloads: 0 });
  });

  const evilTars: [string, Buffer][] = [
    ['dot-dot path', tarOf([{ name: '../evil', content: 'x' }])],
    ['nested dot-dot', tarOf([{ name: 'a/../../evil', content: 'x' }])],
    ['absolute path', tarOf([{ name: '/tmp/evil', content: 'x' }])],
    ['absolute symlink', tarOf([{ name: 'l', type: '2', linkname: '/etc/passwd' }])],
    ['escaping symlink', tarOf([{ name: 'a/l', type: '2', linkname: '../../x' }])],
    ['escaping hard link', tarOf([{ name: 'h', type: '1', linkname: '../x' }])],
    ['char device', tarOf([{ name: 'dev', type: '3' }])],
    ['fifo', tarOf([{ name: 'fifo', type: '6' }])],
    [
      'write through a symlink',
      tarOf([
        { name: 'd/', type: '5' },
        { name: 'l', type: '2', linkname: 'd' },
        { name: 'l/f', content: 'x' },
      ]),
    ],
    [
      'symlink chain escaping',
      tarOf([
        { name: 'd/', type: '5' },
        { name: 'd/b', type: '2', linkname: '..' },
        { name: 'a', type: '2', linkname: 'd/b/..' },
      ]),
    ],
  ];
  const evilZips: [string, Buffer][] = [
    ['zip-slip', zipOf([{ name: '../evil', content: 'x' }])],
    ['zip absolute', zipOf([{ name: '/tmp/evil', content: 'x' }])],
    ['zip escaping symlink', zipOf([{ name: 'l', content: '../../etc/passwd', mode: 0o120777 }])],
    ['zip absolute symlink', zipOf([{ name: 'l', content: '/etc/passwd', mode: 0o120777 }])],
    ['zip device', zipOf([{ name: 'dev', mode: 0o020644 }])],
    [
      'zip through symlink',
      zipOf([
        { name: 'd/', mode: 0o040755 },
        { name: 'l', content: 'd', mode: 0o120777 },
        { name: 'l/f', content: 'x' },
      ]),
    ],
  ];

  it.each([...evilTars, ...evilZips])('refuses a malicious archive: %s', async (_name, bytes) => {
    const { cache, root } = await cacheWith(() => ({ buffer: bytes }));
    const e = await cache.acquire(ref()).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.unsafe_archive'), String(e)).toBe(true);
    expect(existsSync(join(root, 'io.murano.Apache', '1.0.0', 'a1'))).toBe(false);
    expect(existsSync(join(root, 'evil'))).toBe(false);
    expect(await leftovers(root)).toEqual([]);
  });

  it('accepts bare bytes, streams and paths from the fetcher', async () => {
    const bytes = simpleTar('bare');
    const src = await tempDir('pc-src-');
    await writeFile(join(src, 'p.tar'), bytes);
    const { cache } = await cacheWith(
      (r) =>
        (r.id === 'bytes'
          ? bytes
          : r.id === 'path'
            ? join(src, 'p.tar')
            : new Blob([new Uint8Array(bytes)]).stream()) as unknown as FetchedPackage,
    );
    for (const id of ['bytes', 'path', 'stream']) {
      await using pkg = await cache.acquire(ref(id, id));
      expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('name: bare\n');
    }
  });

  it('sweeps leftovers of dead processes on start, keeps live ones', async () => {
    const root = await tempDir();
    const tmp = join(root, '.tmp');
    await mkdir(join(tmp, 'dl-999999-abc', 'pkg'), { recursive: true });
    await mkdir(join(tmp, 'trash-999999-abc'), { recursive: true });
    await writeFile(join(tmp, 'progress-x.json'), JSON.stringify({ pid: 999999, received: 1 }));
    await mkdir(join(tmp, `dl-${process.pid}-live`));
    await mkdir(join(root, 'a', '1'), { recursive: true });
    await writeFile(join(root, 'a', '1', '.orphan.json'), '{}'); // sidecar whose rename never came
    await PackageCache.open({ root, fetch: () => Promise.resolve(simpleTar()) });
    expect((await readdir(tmp)).sort()).toEqual([`dl-${process.pid}-live`]);
    expect(existsSync(join(root, 'a', '1', '.orphan.json'))).toBe(false);
  });

  it('refuses bytes that are no archive', async () => {
    const { cache } = await cacheWith(() => ({
      buffer: Buffer.from('plain text, not an archive'),
    }));
    const e = await cache.acquire(ref()).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.unsupported_format')).toBe(true);
  });

  it('wraps fetcher failures in package-cache.fetch_failed and caches nothing', async () => {
    const { cache, root } = await cacheWith(() => Promise.reject(new Error('boom')));
    const e = await cache.acquire(ref()).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.fetch_failed')).toBe(true);
    expect(await leftovers(root)).toEqual([]);
  });

  it('16 concurrent acquires of one missing id fetch once; waiters see progress and explained waits', async () => {
    const bytes = simpleTar();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { cache, calls } = await cacheWith(
      async (): Promise<FetchedPackage> => ({
        stream: (async function* () {
          yield bytes.subarray(0, 512);
          await gate;
          yield bytes.subarray(512);
        })(),
        size: bytes.length,
      }),
      { progressIntervalMs: 5, waitReportMs: 20 },
    );
    const waits: { lock: string; pid: number | undefined; done: boolean }[] = [];
    cache.on('wait', (w) => waits.push({ lock: w.lock, pid: w.pid, done: w.done }));
    const progress: number[] = [];
    const all = Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        cache.acquire(ref(), i === 15 ? { onProgress: (p) => progress.push(p.received) } : {}),
      ),
    );
    await new Promise((r) => setTimeout(r, 100));
    release();
    const pkgs = await all;
    expect(calls).toHaveLength(1);
    expect(new Set(pkgs.map((p) => p.path)).size).toBe(1);
    expect(waits.some((w) => w.lock === 'download' && w.pid === process.pid && !w.done)).toBe(true);
    expect(progress.length).toBeGreaterThan(0);
    await Promise.all(pkgs.map((p) => p.release()));
    expect(cache.stats()).toMatchObject({ downloads: 1, inUse: 0 });
  });

  it('re-upload with a new id: the old path stays while leased, then goes', async () => {
    const { cache, root } = await cacheWith((r) => ({ buffer: simpleTar(r.id) }));
    const removed: string[] = [];
    cache.on('remove', (e) => removed.push(`${e.ref.id}:${e.reason}`));
    const old = await cache.acquire(ref('old'));
    {
      await using fresh = await cache.acquire(ref('new'));
      expect(await readFile(join(fresh.path, 'manifest.yaml'), 'utf8')).toBe('name: new\n');
    }
    expect(await readFile(join(old.path, 'manifest.yaml'), 'utf8')).toBe('name: old\n');
    expect(removed).toEqual([]);
    // Two leases on the old id: it goes when the last one is released, not before.
    const again = await cache.acquire(ref('old'));
    expect(again.hit).toBe(true);
    const listed = await cache.entries();
    expect(listed.map((e) => [e.id, e.leasesHere, e.inUse, e.outdated])).toEqual([
      ['old', 2, true, true],
      ['new', 0, false, false],
    ]);
    expect(listed[0]).toMatchObject({
      fqn: 'io.murano.Apache',
      version: '1.0.0',
      path: old.path,
      bytes: old.size,
      inUseElsewhere: undefined,
    });
    expect(listed[1]!.inUseElsewhere).toBe(false);
    expect(listed[0]!.lastUsedAt).toBeGreaterThanOrEqual(listed[0]!.installedAt);
    await old.release();
    expect(existsSync(old.path)).toBe(true);
    await old.release(); // idempotent
    expect(existsSync(old.path)).toBe(true);
    await again.release();
    expect(removed).toEqual(['old:outdated']);
    expect(existsSync(old.path)).toBe(false);
    expect(existsSync(join(root, 'io.murano.Apache', '1.0.0', '.old.outdated'))).toBe(false);
    const result = await cache.prune({ idleTtlMs: Infinity, maxBytes: Infinity });
    expect(result.removed).toEqual([]);
    // The next downloader of that fqn/version removes the unused outdated ids at once.
    await (await cache.acquire(ref('newer'))).release();
    expect(removed.sort()).toEqual(['new:outdated', 'old:outdated']);
    expect(existsSync(join(root, 'io.murano.Apache', '1.0.0', 'newer'))).toBe(true);
    expect((await cache.entries({ probe: false })).map((e) => e.id)).toEqual(['newer']);
  });

  it('an outdated id fetched again explicitly is served, and removed when released', async () => {
    const { cache, calls } = await cacheWith((r) => ({ buffer: simpleTar(r.id) }));
    await (await cache.acquire(ref('a'))).release();
    await (await cache.acquire(ref('b'))).release();
    await using a = await cache.acquire(ref('a'));
    expect(a.hit).toBe(false);
    expect(calls.map((c) => c.id)).toEqual(['a', 'b', 'a']);
    // 'b' went when 'a' was downloaded again (the newest install wins).
    expect((await cache.entries()).map((e) => [e.id, e.outdated])).toEqual([['a', false]]);
    await expect(cache.entries({ probe: 'yes' as unknown as boolean })).rejects.toThrow(TypeError);
  });

  it('several versions in use at once; olderVersions: remove cleans the unused ones', async () => {
    const { cache } = await cacheWith((r) => ({ buffer: simpleTar(r.version) }), {
      olderVersions: 'remove',
    });
    const v1 = await cache.acquire(ref('x', '1'));
    await (await cache.acquire(ref('y', '2'))).release();
    const v3 = await cache.acquire(ref('z', '3'));
    expect(existsSync(v1.path)).toBe(true); // in use: kept
    expect(existsSync(join(cache.root, 'io.murano.Apache', '2', 'y'))).toBe(false);
    await v1.release(); // its last user: removed now
    expect(existsSync(v1.path)).toBe(false);
    await v3.release();
    await (await cache.acquire(ref('w', '4'))).release();
    expect(existsSync(v3.path)).toBe(false);
  });

  it('byte cap: never evicts a held package, converges when released', async () => {
    const big = (n: string) => tarOf([{ name: 'blob', content: Buffer.alloc(20_000, n) }]);
    const { cache } = await cacheWith((r) => ({ buffer: big(r.fqn) }), { maxBytes: 50_000 });
    const held = await Promise.all(
      ['a', 'b', 'c', 'd'].map((f) => cache.acquire(ref('1', '1', f))),
    );
    await cache.prune();
    for (const p of held) expect(existsSync(join(p.path, 'blob'))).toBe(true);
    expect(cache.stats().bytes).toBe(80_000);
    for (const p of held) await p.release();
    const r = await cache.prune();
    expect(r.bytes).toBeLessThanOrEqual(50_000);
    expect(existsSync(held[3]!.path)).toBe(true); // most recently used kept
    expect(existsSync(held[0]!.path)).toBe(false);
    expect(cache.stats().evictions).toBe(2);
  });

  it('byte cap: evicts the least recently used first, a package used again counting as new', async () => {
    const big = (n: string) => tarOf([{ name: 'blob', content: Buffer.alloc(20_000, n) }]);
    // Every use at the same clock time (written to the sidecars too): only the order of use
    // tells them apart.
    const clock = manualClock(1_000);
    const { cache } = await cacheWith((r) => ({ buffer: big(r.fqn) }), {
      maxBytes: 50_000,
      clock,
      touchIntervalMs: 0,
    });
    const use = async (f: string) => (await cache.acquire(ref('1', '1', f))).release();
    await use('a');
    await use('b');
    await use('a'); // a hit: now the most recently used, at the same clock time
    await use('c'); // over the cap: one has to go
    await cache.prune();
    expect((await cache.entries()).map((e) => e.ref.fqn).sort()).toEqual(['a', 'c']);
    expect(cache.stats().evictions).toBe(1);
  });

  it('idle TTL removes unused packages only', async () => {
    // A clock ahead of the files' real times, moved on before the prune: "idle for more than
    // 0 ms" then holds whatever the sidecars' mtimes (real, sub-millisecond, stamped in the
    // background) say. On the system clock a prune in the same millisecond as the last use found
    // nothing idle.
    const clock = manualClock(Date.now() + 60_000);
    const { cache } = await cacheWith(() => ({ buffer: simpleTar() }), { clock });
    const held = await cache.acquire(ref('held'));
    await (await cache.acquire(ref('idle', '2'))).release();
    await clock.advance(1);
    const r = await cache.prune({ idleTtlMs: 0 });
    expect(r.removed.map((x) => x.id)).toEqual(['idle']);
    expect(r.inUse.map((x) => x.id)).toEqual(['held']);
    await held.release();
  });

  it('reads time from the injected clock: idle TTL and last use follow it', async () => {
    const clock = manualClock(Date.now());
    const { cache } = await cacheWith(() => ({ buffer: simpleTar() }), { clock });
    const hour = 3_600_000;
    await (await cache.acquire(ref('old'))).release();
    await clock.advance(2 * hour);
    await (await cache.acquire(ref('fresh', '2'))).release();
    const [fresh, old] = await cache.entries({ probe: false });
    // (the sidecar's mtime, a floor for the last use after a rescan, is the file system's time)
    expect(fresh!.lastUsedAt - old!.lastUsedAt).toBeGreaterThan(2 * hour - 60_000);
    expect((await cache.prune({ idleTtlMs: 3 * hour })).removed).toEqual([]);
    const r = await cache.prune({ idleTtlMs: hour });
    expect(r.removed.map((x) => x.id)).toEqual(['old']);
  });

  it('honours abort signals and close()', async () => {
    const { cache } = await cacheWith(() => new Promise<FetchedPackage>(() => {}));
    const ac = new AbortController();
    const p = cache.acquire(ref(), { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('stop')), 20);
    await expect(p).rejects.toThrow('stop');
    await cache.close();
    const e = await cache.acquire(ref()).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.closed')).toBe(true);
    const p2 = await cache.prune().catch((x: unknown) => x);
    expect(RiggingError.hasCode(p2, 'package-cache.closed')).toBe(true);
  });

  it('rejects bad options with a TypeError naming the value', () => {
    expect(() => new PackageCache({ root: '', fetch: () => Promise.reject(new Error()) })).toThrow(
      TypeError,
    );
    expect(
      () =>
        new PackageCache({ root: '/x', fetch: () => Promise.reject(new Error()), maxBytes: -1 }),
    ).toThrow(/maxBytes/);
    const make = (o: object) => () =>
      new PackageCache({ root: '/x', fetch: () => Promise.reject(new Error()), ...o });
    // 0 is a bound that means something (keep nothing unused, stamp every use); Infinity: none.
    for (const o of [
      { maxBytes: 0 },
      { idleTtlMs: 0 },
      { touchIntervalMs: 0 },
      { maxBytes: Infinity },
    ])
      expect(make(o)).not.toThrow();
    // An interval of 0 would spin.
    expect(make({ progressIntervalMs: 0 })).toThrow(
      /PackageCache: progressIntervalMs must be a finite number > 0, got 0/,
    );
    expect(make({ waitReportMs: 0 })).toThrow(/waitReportMs/);
    expect(make({ touchIntervalMs: NaN })).toThrow(/touchIntervalMs/);
    expect(make({ idleTtlMs: '1' })).toThrow(/idleTtlMs must be a finite number >= 0, got "1"/);
  });

  it('prune validates its bounds before changing anything', async () => {
    const { cache } = await cacheWith(() => ({ buffer: simpleTar() }));
    await (await cache.acquire(ref())).release();
    await expect(cache.prune({ maxBytes: -1 })).rejects.toThrow(/PackageCache.prune: maxBytes/);
    expect(cache.stats().entries).toBe(1);
  });
});
