import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32, deflateRawSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import type { RiggingError } from '@rigging/core';
import { PackageCache, type FetchedPackage } from '../src/index.js';
import { expectCode, refusal, tarOf, tempDir, zipOf, type ZipEntry } from './helpers.js';

// Archives that lie in their headers, or are damaged: each is refused with a stable code, names
// the entry relative to the package, and leaves nothing installed.

const text = 'hello, package\n'.repeat(200);
const name = 'lib/a.txt';
const deflated = deflateRawSync(Buffer.from(text));
const file = (over: Partial<ZipEntry> = {}): ZipEntry => ({
  name,
  content: text,
  deflate: true,
  ...over,
});

/** The three ways a fetcher hands over bytes (a stream is spooled to a file for a zip). */
const handovers: [string, (bytes: Buffer, dir: string) => Promise<() => FetchedPackage>][] = [
  ['a buffer', (bytes) => Promise.resolve(() => ({ buffer: bytes }))],
  [
    'a stream',
    (bytes) =>
      Promise.resolve(() => ({
        stream: (async function* () {
          yield bytes.subarray(0, 100);
          yield bytes.subarray(100);
        })(),
      })),
  ],
  [
    'a file',
    async (bytes, dir) => {
      const path = join(dir, 'archive.bin');
      await writeFile(path, bytes);
      return () => ({ path });
    },
  ],
];

/** Refuses `bytes` handed over every way; returns the errors. */
async function refuseEveryWay(bytes: Buffer): Promise<RiggingError[]> {
  const errors: RiggingError[] = [];
  for (const [, handover] of handovers) {
    const dir = await tempDir('pc-src-');
    const { error, bytesLeft } = await refusal(await handover(bytes, dir));
    // (refusal checks the cache's directories; the fetched file's is not named either)
    expect(String((error as Error)?.message)).not.toContain(dir);
    expect(bytesLeft).toBe(0);
    errors.push(error as RiggingError);
  }
  return errors;
}

const lyingZips: [string, Buffer, RegExp, boolean][] = [
  // [what lies, the zip, the problem reported, whether the entry is named]
  ['a flipped CRC-32 (deflated)', zipOf([file({ lie: { crc: crc32(text) ^ 1 } })]), /CRC-32/, true],
  [
    'a flipped CRC-32 (stored)',
    zipOf([file({ deflate: false, lie: { crc: crc32(text) ^ 0x80000000 } })]),
    /CRC-32/,
    true,
  ],
  [
    'an uncompressed size smaller than the bytes (both headers)',
    zipOf([file({ lie: { localUncompressed: 100, centralUncompressed: 100 } })]),
    /too many bytes/,
    true,
  ],
  [
    'an uncompressed size larger than the bytes (both headers)',
    zipOf([file({ lie: { localUncompressed: 5000, centralUncompressed: 5000 } })]),
    /not enough bytes/,
    true,
  ],
  [
    'a compressed size that cuts the deflate stream (both headers)',
    zipOf([
      file({
        lie: { localCompressed: deflated.length - 8, centralCompressed: deflated.length - 8 },
      }),
    ]),
    /unexpected end of file/i,
    true,
  ],
  [
    'a compressed size past the end of the file',
    zipOf([file({ lie: { localCompressed: 1 << 20, centralCompressed: 1 << 20 } })]),
    /overflows/,
    true,
  ],
  [
    'local and central uncompressed sizes that differ',
    zipOf([file({ lie: { localUncompressed: 1 } })]),
    /local header gives uncompressed size 1, the central directory 3000/,
    true,
  ],
  [
    'local and central compressed sizes that differ',
    zipOf([file({ lie: { localCompressed: 7 } })]),
    /local header gives compressed size 7/,
    true,
  ],
  [
    'local and central CRC-32 that differ',
    zipOf([file({ lie: { localCrc: 1 } })]),
    /local header gives CRC-32 1/,
    true,
  ],
  [
    'a local file name that differs from the central directory',
    zipOf([file({ lie: { localName: 'lib/b.txt' } })]),
    /names another file/,
    true,
  ],
  [
    'a stored entry whose sizes disagree',
    zipOf([file({ deflate: false, lie: { centralCompressed: 10, localCompressed: 10 } })]),
    /size mismatch/,
    false,
  ],
  [
    'a truncated zip',
    zipOf([file(), { name: 'b.txt', content: text }]).subarray(0, 2500),
    /central directory/,
    false,
  ],
];

describe('zips that lie or are damaged', () => {
  it('the honest zip the lying ones are made from is accepted, contents intact', async () => {
    const root = await tempDir();
    const zip = zipOf([file(), file({ name: 'b.txt', deflate: false })]);
    const cache = await PackageCache.open({
      root,
      durable: false,
      fetch: () => Promise.resolve({ buffer: zip }),
    });
    await using pkg = await cache.acquire({ fqn: 'a', version: '1', id: 'x' });
    expect(await readFile(join(pkg.path, name), 'utf8')).toBe(text);
    expect(await readFile(join(pkg.path, 'b.txt'), 'utf8')).toBe(text);
    await cache.close();
  });

  it.each(lyingZips)(
    '%s: package-cache.corrupt_archive, nothing installed',
    async (_, zip, problem, namesEntry) => {
      for (const error of await refuseEveryWay(zip)) {
        expectCode(error, 'package-cache.corrupt_archive');
        expect(error.message).toMatch(problem);
        const details = error.details as { entry?: string; problem: string };
        expect(details.problem).toMatch(problem);
        if (namesEntry) {
          expect(details.entry).toBe(name);
          expect(error.message).toContain(`entry "${name}"`);
        }
      }
    },
  );

  it('a damaged entry after a good one leaves neither installed', async () => {
    const zip = zipOf([{ name: 'good.txt', content: text }, file({ lie: { crc: 12345 } })]);
    const [error] = await refuseEveryWay(zip);
    expectCode(error, 'package-cache.corrupt_archive');
    expect(error!.details).toMatchObject({ entry: name });
  });

  it.each([
    ['an entry that appears twice', [file(), file()], /appears twice/],
    ['a file where a directory is', [file({ name: 'lib' }), file()], /clashes with another entry/],
    [
      'a symlink whose target is longer than 4096 bytes',
      [{ name: 'l', content: 'x'.repeat(5000), mode: 0o120777 }],
      /longer than 4096/,
    ],
  ])('%s: package-cache.unsafe_archive naming the entry', async (_, entries, problem) => {
    for (const error of await refuseEveryWay(zipOf(entries as ZipEntry[]))) {
      expectCode(error, 'package-cache.unsafe_archive');
      expect(error.message).toMatch(problem);
      expect((error.details as { entry: string }).entry).not.toMatch(/^\//);
    }
  });
});

describe('damaged tar archives', () => {
  const tar = tarOf([{ name, content: text }]);

  it('a gzip with a flipped CRC-32 or cut short: package-cache.corrupt_archive', async () => {
    const gz = gzipSync(tar);
    const flipped = Buffer.from(gz);
    flipped[flipped.length - 8]! ^= 0xff; // the gzip trailer's CRC-32
    for (const bytes of [flipped, gz.subarray(0, gz.length - 20)]) {
      for (const error of await refuseEveryWay(bytes)) {
        expectCode(error, 'package-cache.corrupt_archive');
      }
    }
  });

  it('a hard link to a missing file names the entry, never a server path', async () => {
    const bytes = tarOf([{ name: 'h', type: '1', linkname: 'missing' }]);
    for (const error of await refuseEveryWay(bytes)) {
      expectCode(error, 'package-cache.unsafe_archive');
      expect(error.message).toContain('"h"');
    }
  });
});
