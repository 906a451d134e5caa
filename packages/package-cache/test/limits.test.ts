import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { DEFAULT_ARCHIVE_LIMITS, PackageCache, type ArchiveLimits } from '../src/index.js';
import { ArchiveBudget, resolveLimits } from '../src/limits.js';
import { untar } from '../src/tar-stream.js';
import {
  expectCode,
  refusal,
  tarHeader,
  tarOf,
  tarOfEmptyFiles,
  tempDir,
  zipOf,
} from './helpers.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const ref = { fqn: 'io.example.Bomb', version: '1', id: 'a' };

/** The files this process holds open under `dir` (read from /proc). */
function openFilesUnder(dir: string): string[] {
  return readdirSync('/proc/self/fd')
    .map((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        return ''; // closed since the listing
      }
    })
    .filter((path) => path.startsWith(`${dir}/`));
}

async function* chunks(...parts: Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* parts;
}

/** A gzip member of 1 MiB of zeros: about 1 KiB, so members chain into a bomb. */
const zerosMember = gzipSync(Buffer.alloc(MiB));

describe('archive limits', () => {
  it('stops a streamed gzip bomb while inflating (ratio), long before it ends', async () => {
    let yielded = 0;
    async function* bomb(): AsyncGenerator<Uint8Array> {
      // One file announcing 256 MiB (under the 512 MiB default), then endless zeros.
      yield gzipSync(tarHeader('zeros', 256 * MiB));
      for (;;) {
        yielded++;
        yield zerosMember;
      }
    }
    const { error, bytesLeft } = await refusal(() => ({ stream: bomb() }));
    expectCode(error, 'package-cache.ratio_exceeded');
    expect((error as RiggingError).details).toMatchObject({
      limit: 'maxRatio',
      max: DEFAULT_ARCHIVE_LIMITS.maxRatio,
    });
    expect(yielded).toBeLessThan(64); // stopped after a few MiB inflated, not 256 MiB
    expect(bytesLeft).toBeLessThan(64 * 1024);
  });

  it('refuses a gzip bomb handed over as a buffer without inflating it in memory', async () => {
    const bytes = Buffer.concat([
      gzipSync(tarHeader('zeros', 256 * MiB)),
      ...Array.from({ length: 256 }, () => zerosMember),
    ]);
    expect(bytes.length).toBeLessThan(MiB);
    const { error, bytesLeft } = await refusal(() => ({ buffer: bytes }));
    expectCode(error, 'package-cache.ratio_exceeded');
    expect(bytesLeft).toBeLessThan(64 * 1024);
  });

  it('refuses an entry announcing more than maxExpandedBytes before writing its body', async () => {
    const bytes = gzipSync(Buffer.concat([tarHeader('huge', 5 * GiB), Buffer.alloc(64 * 1024)]));
    for (const fetched of [() => ({ buffer: bytes }), () => ({ stream: chunks(bytes) })]) {
      const { error, bytesLeft } = await refusal(fetched);
      expectCode(error, 'package-cache.too_large');
      expect((error as RiggingError).details).toMatchObject({
        limit: 'maxExpandedBytes',
        max: DEFAULT_ARCHIVE_LIMITS.maxExpandedBytes,
        entry: 'huge',
      });
      expect(bytesLeft).toBe(0);
    }
  });

  it('counts expanded bytes across entries (tar and zip)', async () => {
    const files = Array.from({ length: 5 }, (_, i) => ({
      name: `f${i}`,
      content: 'x'.repeat(300),
    }));
    const limits = { maxExpandedBytes: 1000 };
    for (const bytes of [tarOf(files), zipOf(files)]) {
      const { error, bytesLeft } = await refusal(() => ({ buffer: bytes }), limits);
      expectCode(error, 'package-cache.too_large');
      expect(bytesLeft).toBeLessThanOrEqual(1000);
    }
  });

  it('refuses an archive larger than maxArchiveBytes: announced, buffered, streamed or a file', async () => {
    const bytes = tarOf([{ name: 'a', content: Buffer.alloc(8192, 1) }]);
    const limits = { maxArchiveBytes: 4096 };
    const dir = await tempDir('pc-src-');
    await writeFile(join(dir, 'a.tar'), bytes);
    let pulled = 0;
    const slow = async function* () {
      for (let i = 0; i < bytes.length; i += 1024) {
        pulled++;
        yield bytes.subarray(i, i + 1024);
      }
    };
    for (const fetched of [
      () => ({ stream: chunks(bytes), size: bytes.length }),
      () => ({ buffer: bytes }),
      () => ({ stream: slow() }),
      () => ({ path: join(dir, 'a.tar') }),
    ]) {
      const { error } = await refusal(fetched, limits);
      expectCode(error, 'package-cache.too_large');
      expect((error as RiggingError).details).toMatchObject({
        limit: 'maxArchiveBytes',
        max: 4096,
      });
    }
    expect(pulled).toBeLessThanOrEqual(5);
  });

  it('refuses 10k tiny entries (default maxEntries) without writing them', async () => {
    const tar = tarOfEmptyFiles(DEFAULT_ARCHIVE_LIMITS.maxEntries + 1);
    const { error, bytesLeft } = await refusal(() => ({ buffer: tar }));
    expectCode(error, 'package-cache.too_many_entries');
    expect((error as RiggingError).details).toMatchObject({ limit: 'maxEntries', max: 10_000 });
    expect(bytesLeft).toBe(0);
  });

  it('refuses too many entries while streaming a tar, and at once for a zip', async () => {
    const tar = tarOfEmptyFiles(5000);
    const zip = zipOf(Array.from({ length: 300 }, (_, i) => ({ name: `f${i}` })));
    for (const fetched of [() => ({ stream: chunks(gzipSync(tar)) }), () => ({ buffer: zip })]) {
      const { error } = await refusal(fetched, { maxEntries: 200 });
      expectCode(error, 'package-cache.too_many_entries');
    }
  });

  it.skipIf(!existsSync('/proc/self/fd'))(
    'a streamed tar is refused only once every file written from it is closed',
    async () => {
      // The caller removes the package's directory as soon as the refusal reaches it: a file
      // still open or being created there made that removal fail with ENOTEMPTY.
      const tar = tarOfEmptyFiles(300);
      for (const gzipped of [false, true]) {
        const target = join(await tempDir('pc-settle-'), 'pkg');
        await mkdir(target);
        const bytes = gzipped ? gzipSync(tar) : tar;
        async function* blocks(): AsyncGenerator<Uint8Array> {
          for (let at = 0; at < bytes.length; at += 512) yield bytes.subarray(at, at + 512);
        }
        const budget = new ArchiveBudget(resolveLimits('test', { maxEntries: 200 }), 'pkg');
        const error = await untar(blocks(), gzipped, target, budget, undefined).catch(
          (e: unknown) => e,
        );
        expectCode(error, 'package-cache.too_many_entries');
        expect(openFilesUnder(target)).toEqual([]);
        expect(await readdir(target)).toHaveLength(200);
      }
    },
  );

  it('refuses a zip whose entries inflate past maxRatio before writing them', async () => {
    const zip = zipOf([{ name: 'zeros', content: Buffer.alloc(64 * MiB), deflate: true }]);
    expect(zip.length).toBeLessThan(MiB);
    const { error, bytesLeft } = await refusal(() => ({ buffer: zip }));
    expectCode(error, 'package-cache.ratio_exceeded');
    expect(bytesLeft).toBe(0);
  });

  it('refuses paths deeper than maxPathDepth and names longer than maxNameLength', async () => {
    const deep = tarOf([{ name: Array.from({ length: 10 }, () => 'd').join('/') + '/f' }]);
    const long = tarOf([{ name: 'n'.repeat(90) }]);
    const tooDeep = (await refusal(() => ({ buffer: deep }), { maxPathDepth: 8 })).error;
    expectCode(tooDeep, 'package-cache.unsafe_archive');
    expect((tooDeep as RiggingError).details).toEqual({
      entry: 'd/d/d/d/d/d/d/d/d/d/f',
      problem: 'is 11 levels deep (limit maxPathDepth 8)',
    });
    const tooLong = (await refusal(() => ({ stream: chunks(long) }), { maxNameLength: 80 })).error;
    expectCode(tooLong, 'package-cache.unsafe_archive');
    expect((tooLong as RiggingError).details).toMatchObject({ entry: 'n'.repeat(90) });
  });

  it.each([
    ['zip-slip', tarOf([{ name: '../evil', content: 'x' }])],
    [
      'symlink escape, then a write through it',
      tarOf([
        { name: 'l', type: '2', linkname: '../../..' },
        { name: 'l/evil', content: 'x' },
      ]),
    ],
    [
      'hard link to a file outside',
      tarOf([{ name: 'h', type: '1', linkname: '../../../../etc/passwd' }]),
    ],
    ['character device', tarOf([{ name: 'dev', type: '3' }])],
    ['FIFO', tarOf([{ name: 'fifo', type: '6' }])],
  ])('a streamed gzipped tar with a %s is refused and writes nothing outside', async (_, tar) => {
    const { error, root } = await refusal(() => ({ stream: chunks(gzipSync(tar)) }));
    expectCode(error, 'package-cache.unsafe_archive');
    const names = await readdir(root, { recursive: true });
    expect(
      names.filter((n) => n.endsWith('evil') || n.endsWith('dev') || n.endsWith('fifo')),
    ).toEqual([]);
  });

  it('accepts what fits, and Infinity lifts a limit', async () => {
    const root = await tempDir('pc-limits-');
    const bytes = tarOf([{ name: 'a', content: 'x'.repeat(1000) }]);
    const cache = await PackageCache.open({
      root,
      fetch: () => Promise.resolve({ buffer: bytes }),
      limits: { maxExpandedBytes: 1000, maxEntries: 1, maxArchiveBytes: Infinity },
    });
    await using pkg = await cache.acquire(ref);
    expect(pkg.size).toBe(1000);
    await cache.close();
  });

  it('validates limits', () => {
    const make = (limits: unknown) => () =>
      new PackageCache({
        root: '/tmp/x',
        fetch: () => Promise.resolve('/'),
        limits: limits as ArchiveLimits,
      });
    expect(make({ maxEntries: 0 })).toThrow(/limits.maxEntries must be an integer >= 1, got 0/);
    expect(make({ maxEntries: 1.5 })).toThrow(TypeError);
    expect(make({ maxRatio: -1 })).toThrow(/limits.maxRatio/);
    expect(make({ maxArchiveBytes: 'big' })).toThrow(/limits.maxArchiveBytes/);
    expect(make('x')).toThrow(/limits must be an object/);
    expect(make({ maxRatio: 1.5, maxEntries: Infinity })).not.toThrow();
  });
});

/** `size` bytes that gzip about 80 times smaller: zeros with a random byte every 300. */
function sparse(size: number): Buffer {
  const bytes = Buffer.alloc(size);
  const noise = randomBytes(Math.floor(size / 300));
  for (const [i, b] of noise.entries()) bytes[i * 300] = b;
  return bytes;
}

/** `bytes` as a stream of 4 KiB chunks, counting how many were pulled. */
function counted(bytes: Buffer): {
  stream: () => AsyncGenerator<Uint8Array>;
  pulled: () => number;
} {
  let pulled = 0;
  return {
    stream: async function* () {
      for (let at = 0; at < bytes.length; at += 4096) {
        pulled++;
        yield bytes.subarray(at, at + 4096);
      }
    },
    pulled: () => pulled,
  };
}

describe('default limits', () => {
  // 8 MiB inflating from ~100 KB (80:1): the shape of a 7.6 MB tar.gz that expands to 600 MiB.
  const bomb = gzipSync(tarOf([{ name: 'data.bin', content: sparse(8 * MiB) }]), { level: 9 });

  it('refuse a small bomb (80:1) early, while inflating, leaving nothing', async () => {
    expect(bomb.length).toBeLessThan(200 * 1024);
    const source = counted(bomb);
    const total = Math.ceil(bomb.length / 4096);
    for (const fetched of [() => ({ buffer: bomb }), () => ({ stream: source.stream() })]) {
      const { error, bytesLeft } = await refusal(fetched);
      expectCode(error, 'package-cache.ratio_exceeded');
      expect((error as RiggingError).details).toMatchObject({ limit: 'maxRatio', max: 50 });
      expect(bytesLeft).toBe(0);
    }
    expect(source.pulled()).toBeLessThan(total / 2); // refused after about 1 MiB inflated
  });

  // 10,001 empty files: a 62 KB tar.gz (5 MiB as a tar) that costs a file creation each.
  const emptyFiles = tarOfEmptyFiles(10_001);
  const emptyFilesGz = gzipSync(emptyFiles, { level: 9 });

  it('refuse 10,001 empty files before writing one (tar), or early while inflating (tar.gz)', async () => {
    const plain = await refusal(() => ({ buffer: emptyFiles }));
    expectCode(plain.error, 'package-cache.too_many_entries');
    expect((plain.error as RiggingError).details).toMatchObject({ limit: 'maxEntries' });
    expect(plain.bytesLeft).toBe(0);
    const source = counted(emptyFilesGz);
    const streamed = await refusal(() => ({ stream: source.stream() }));
    // the headers of empty files compress 80:1: the ratio refuses them first
    expectCode(streamed.error, 'package-cache.ratio_exceeded');
    expect(source.pulled()).toBeLessThan(Math.ceil(emptyFilesGz.length / 4096) / 2);
  });

  it('raising the limits admits both', async () => {
    const root = await tempDir('pc-limits-');
    const archives: Record<string, Buffer> = { bomb, empty: emptyFilesGz };
    const cache = await PackageCache.open({
      root,
      durable: false,
      fetch: (r) => Promise.resolve({ buffer: archives[r.id]! }),
      limits: { maxRatio: 100, maxEntries: 20_000 },
    });
    await using big = await cache.acquire({ ...ref, id: 'bomb' });
    expect(big.size).toBe(8 * MiB);
    await using many = await cache.acquire({ ...ref, id: 'empty' });
    expect((await readdir(many.path)).length).toBe(10_001);
    await cache.close();
  });
});

describe('ArchiveBudget (property)', () => {
  it('refuses exactly the first entry that crosses maxEntries or maxExpandedBytes', () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat({ max: 1000 }), { maxLength: 40 }),
        fc.integer({ min: 1, max: 30 }),
        fc.integer({ min: 1, max: 20_000 }),
        (sizes, maxEntries, maxExpandedBytes) => {
          const limits = { ...DEFAULT_ARCHIVE_LIMITS, maxEntries, maxExpandedBytes };
          const budget = new ArchiveBudget(limits, 'p');
          let total = 0;
          for (const [i, size] of sizes.entries()) {
            total += size;
            const expected =
              i + 1 > maxEntries
                ? 'package-cache.too_many_entries'
                : total > maxExpandedBytes
                  ? 'package-cache.too_large'
                  : undefined;
            let code: string | undefined;
            try {
              budget.entry(`f${i}`, size);
            } catch (error) {
              code = (error as RiggingError).code;
            }
            expect(code).toBe(expected);
            if (code) return; // an extraction stops at its first refusal
          }
        },
      ),
    );
  });
});
