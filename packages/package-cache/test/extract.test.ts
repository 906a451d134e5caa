// What the extraction makes of each form a fetcher hands over (bytes, a stream, a file, a
// directory): archives told by their first bytes, anything else refused before a file is
// written; the fetcher's stream closed whenever extraction stops early, an abort heard even while
// it sends nothing; no file left open; a refusal leaving nothing behind (checked by `refusal`).
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readlinkSync, readdirSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import { PackageCache, type FetchedPackage } from '../src/index.js';
import { expectCode, refusal, sri, tarOf, tempDir, zipOf } from './helpers.js';

const ref = { fqn: 'io.example.Extract', version: '1', id: 'a' };

/** A cache whose fetcher hands over `fetched()`. */
async function cacheOf(fetched: () => FetchedPackage | Promise<FetchedPackage>, extra = {}) {
  const root = await tempDir('pc-extract-');
  const cache = await PackageCache.open({
    root,
    fetch: () => Promise.resolve(fetched()),
    durable: false,
    ...extra,
  });
  return { root, cache };
}

/** The bytes as each form a fetcher may hand them over: a buffer, a stream, a file. */
async function forms(bytes: Buffer): Promise<Array<[string, () => FetchedPackage]>> {
  const file = join(await tempDir('pc-extract-src-'), 'payload');
  await writeFile(file, bytes);
  return [
    ['buffer', () => ({ buffer: bytes })],
    [
      'stream',
      () => ({
        stream: (async function* () {
          for (let at = 0; at < bytes.length; at += 100) yield bytes.subarray(at, at + 100);
        })(),
      }),
    ],
    ['file', () => ({ path: file })],
  ];
}

/** Descriptors of this process open on `path`. */
function openOn(path: string): number {
  return readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(join('/proc/self/fd', fd)) === path;
    } catch {
      return false;
    }
  }).length;
}

const text = Buffer.from('not an archive\n'.repeat(80)); // 1,200 bytes

/** What a stream that stalls tells the test. */
interface Stall {
  stream: FetchedPackage;
  /** Resolves when the stream is asked for the chunk it never sends. */
  stalled: Promise<void>;
  /** Resolves when the stream is closed (a generator: once its stalled read is let go). */
  closed: Promise<void>;
  /** Lets a stalled async generator answer its pending read (with one more chunk). */
  letGo: () => void;
}

/** A fetcher's stream, in each form, that sends `head` and then never answers again. */
const stalling: Record<string, (head: Buffer) => Stall> = {
  'an async generator': (head) => {
    const stalled = deferred<void>();
    const closed = deferred<void>();
    const late = deferred<void>();
    const stream = (async function* () {
      try {
        yield head;
        stalled.resolve();
        await late.promise; // a read that does not answer (until the test lets it go)
        yield Buffer.alloc(512);
      } finally {
        closed.resolve();
      }
    })();
    return {
      stream: { stream },
      stalled: stalled.promise,
      closed: closed.promise,
      letGo: late.resolve,
    };
  },
  'a Node stream': (head) => {
    const stalled = deferred<void>();
    let sent = false;
    const stream = new Readable({
      read() {
        if (sent) stalled.resolve();
        else this.push(head);
        sent = true;
      },
    });
    const closed = new Promise<void>((resolve) => stream.on('close', resolve));
    return { stream: { stream }, stalled: stalled.promise, closed, letGo: () => {} };
  },
  'a web stream': (head) => {
    const stalled = deferred<void>();
    const closed = deferred<void>();
    let sent = false;
    // No read ahead (high-water mark 0): `pull` is called only for a read that waits for it.
    const stream = new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          if (sent) {
            stalled.resolve();
            return new Promise<void>(() => {});
          }
          sent = true;
          controller.enqueue(head);
          return undefined;
        },
        cancel() {
          closed.resolve();
        },
      },
      { highWaterMark: 0 },
    );
    return {
      stream: { stream },
      stalled: stalled.promise,
      closed: closed.promise,
      letGo: () => {},
    };
  },
};

describe('extraction', () => {
  it('refuses what is no tar or zip, in every form, naming the package', async () => {
    const lookalikes = {
      // A zip's central directory signature is no archive's start.
      'PK, central directory': Buffer.concat([Buffer.from([0x50, 0x4b, 1, 2]), text]),
      'P?, a local header': Buffer.concat([Buffer.from([0x50, 0x58, 3, 4]), text]),
      '?K, a local header': Buffer.concat([Buffer.from([0x51, 0x4b, 3, 4]), text]),
      'text past 512 bytes': text,
      // `ustar` anywhere but at 257 is no tar header.
      'ustar at 256': Buffer.concat([Buffer.alloc(256), Buffer.from('ustar'), text]),
    };
    for (const [name, bytes] of Object.entries(lookalikes)) {
      for (const [form, fetched] of await forms(bytes)) {
        const { error } = await refusal(fetched);
        expectCode(error, 'package-cache.unsupported_format');
        expect((error as Error).message, `${name} as a ${form}`).toBe(
          'io.example.Bomb/1/a is neither a tar (optionally gzipped) nor a zip archive',
        );
      }
    }
  });

  it('installs a zip with no entries as an empty package, in every form', async () => {
    const empty = zipOf([]);
    expect([...empty.subarray(0, 4)]).toEqual([0x50, 0x4b, 5, 6]);
    for (const [form, fetched] of await forms(empty)) {
      const { cache } = await cacheOf(fetched);
      await using pkg = await cache.acquire(ref);
      expect(await readdir(pkg.path), form).toEqual([]);
      await cache.close();
    }
  });

  it('installs a tar that is exactly at the entry and byte limits, in every form', async () => {
    const tar = tarOf([
      { name: 'a', content: 'x'.repeat(100) },
      { name: 'b', content: 'y'.repeat(60) },
      { name: 'c/', type: '5' },
      { name: 'c/d', content: 'z'.repeat(40) },
    ]);
    for (const [form, fetched] of await forms(tar)) {
      const limits = { maxEntries: 4, maxExpandedBytes: 200 };
      const { cache } = await cacheOf(fetched, { limits });
      await using pkg = await cache.acquire(ref);
      expect((await readdir(pkg.path)).sort(), form).toEqual(['a', 'b', 'c']);
      await cache.close();
      // One entry or one byte fewer allowed, and it is refused.
      for (const tight of [
        { ...limits, maxEntries: 3 },
        { ...limits, maxExpandedBytes: 199 },
      ]) {
        const { error } = await refusal(fetched, tight);
        expect(String((error as Error).message), form).toMatch(/max(Entries|ExpandedBytes)/);
      }
    }
  });

  it('refuses to check an integrity on a directory, before copying anything', async () => {
    const source = await tempDir('pc-extract-dir-');
    await mkdir(join(source, 'sub'));
    await writeFile(join(source, 'sub', 'f'), 'f');
    const { cache, root } = await cacheOf(() => ({ path: source, integrity: 'sha512-AAAA' }));
    const error = await cache.acquire(ref).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe(
      `integrity cannot be checked for a directory (${source})`,
    );
    expect(await readdir(join(root, '.tmp'))).toEqual([]);
    await cache.close();
  });

  it('a stream chunk that is not bytes is refused with a TypeError naming its type, and the stream is closed', async () => {
    let closed = false;
    const { error } = await refusal(() => ({
      stream: (async function* () {
        try {
          yield 42 as unknown as Uint8Array;
          yield tarOf([{ name: 'a', content: 'a' }]);
        } finally {
          closed = true;
        }
      })(),
    }));
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe(
      'a package stream must yield Uint8Array chunks, got number',
    );
    expect(closed).toBe(true);
  });

  it('a zip stream past maxArchiveBytes is refused while it is spooled, and the stream is closed', async () => {
    const zip = zipOf([{ name: 'big', content: Buffer.alloc(64 * 1024, 1) }]);
    let closed = false;
    let yielded = 0;
    const { error } = await refusal(
      () => ({
        stream: (async function* () {
          try {
            for (let at = 0; at < zip.length; at += 1024) {
              yielded++;
              yield zip.subarray(at, at + 1024);
            }
          } finally {
            closed = true;
          }
        })(),
      }),
      { maxArchiveBytes: 16 * 1024 },
    );
    expectCode(error, 'package-cache.too_large');
    expect(closed).toBe(true);
    expect(yielded).toBeLessThan(32);
  });

  it('a tar or zip read from a file leaves no descriptor open on it', async () => {
    const tar = tarOf([{ name: 'a', content: 'a' }]);
    const zip = zipOf([{ name: 'a', content: 'a' }]);
    for (const bytes of [tar, zip]) {
      const file = join(await tempDir('pc-extract-src-'), 'payload');
      await writeFile(file, bytes);
      const { cache } = await cacheOf(() => ({ path: file }));
      {
        await using pkg = await cache.acquire(ref);
        expect(await readdir(pkg.path)).toEqual(['a']);
      }
      await cache.close();
      expect(openOn(file)).toBe(0);
    }
  });

  it('an abort while a local zip is read stops the install there, and nothing stays', async () => {
    const zip = zipOf([{ name: 'big', content: Buffer.alloc(8 * 1024 * 1024, 1) }]);
    const file = join(await tempDir('pc-extract-src-'), 'payload.zip');
    await writeFile(file, zip);
    const { cache, root } = await cacheOf(() => ({ path: file }));
    const controller = new AbortController();
    const reason = new Error('stop');
    const received: number[] = [];
    const error = await cache
      .acquire(ref, {
        signal: controller.signal,
        onProgress: (p) => {
          received.push(p.received);
          // Aborted from inside the read: its first chunk has been hashed.
          if (p.received > 0) controller.abort(reason);
        },
      })
      .catch((e: unknown) => e);
    expect(error).toBe(reason);
    expect(Math.max(...received)).toBeLessThan(zip.length);
    expect(existsSync(join(root, ref.fqn, ref.version, ref.id))).toBe(false);
    expect((await readdir(join(root, '.tmp'))).filter((n) => !n.startsWith('progress-'))).toEqual(
      [],
    );
    await cache.close();
  });

  it("an abort while the fetcher's stream stalls rejects at once with its reason, in every form and at every stage; the stream is closed and nothing stays", async () => {
    const tar = tarOf([{ name: 'big', content: Buffer.alloc(64 * 1024, 1) }]);
    const zip = zipOf([{ name: 'big', content: Buffer.alloc(64 * 1024, 1) }]);
    const stages = {
      'in its first 512 bytes': tar.subarray(0, 100),
      'inside a tar': tar.subarray(0, 4096),
      'while a zip is spooled': zip.subarray(0, 4096),
    };
    for (const [form, stall] of Object.entries(stalling)) {
      for (const [stage, head] of Object.entries(stages)) {
        const s = stall(head);
        const { cache, root } = await cacheOf(() => s.stream);
        const controller = new AbortController();
        const reason = new Error(`stop ${form} ${stage}`);
        const received = deferred<void>();
        const acquired = cache
          .acquire(ref, {
            signal: controller.signal,
            onProgress: (p) => {
              if (p.received >= head.length) received.resolve();
            },
          })
          .catch((e: unknown) => e);
        // Aborted once the head is in and the stream has been asked for more: without the
        // abort, the install would wait for a chunk that never comes.
        await Promise.all([received.promise, s.stalled]);
        controller.abort(reason);
        expect(await acquired, `${form}, ${stage}`).toBe(reason);
        expect(existsSync(join(root, ref.fqn, ref.version, ref.id))).toBe(false);
        const left = (await readdir(join(root, '.tmp'))).filter((n) => !n.startsWith('progress-'));
        expect(left, `${form}, ${stage}`).toEqual([]);
        // A Node or web stream is closed at once; a generator once its pending read answers.
        s.letGo();
        await s.closed;
        await cache.close();
      }
    }
  }, 30_000);

  it('a stream refused early is closed, its own clean-up done, before the acquire rejects', async () => {
    // Its `finally` takes a while (a connection given back, a temp file removed).
    let cleanedUp = false;
    const { error } = await refusal(() => ({
      stream: (async function* () {
        try {
          yield Buffer.alloc(1024); // neither a tar nor a zip: spooled
          yield 42 as unknown as Uint8Array; // refused
        } finally {
          await new Promise((resolve) => setTimeout(resolve, 50));
          cleanedUp = true;
        }
      })(),
    }));
    expect(error).toBeInstanceOf(TypeError);
    expect(cleanedUp).toBe(true);
  });

  it('bytes that are no archive, with an integrity they do not match, are refused as a mismatch in every form', async () => {
    for (const [form, fetched] of await forms(text)) {
      const { error } = await refusal(() => ({ ...fetched(), integrity: sri(zipOf([])) }));
      expectCode(error, 'package-cache.integrity_mismatch');
      expect((error as Error).message, form).toMatch(
        /^integrity mismatch for io\.example\.Bomb\/1\/a: /,
      );
    }
  });

  it('a path that is a FIFO or a device is refused before it is opened', async () => {
    const fifo = join(await tempDir('pc-extract-fifo-'), 'package.tgz');
    execFileSync('mkfifo', [fifo]);
    // A writer holds the FIFO open (Linux opens it read-write at once), so that an open of it
    // does not block; with none, opening it would block the install for good.
    const writer = openSync(fifo, 'r+');
    try {
      for (const path of [fifo, '/dev/null']) {
        const { error } = await refusal(() => ({ path }));
        expectCode(error, 'package-cache.unsupported_format');
        expect((error as Error).message).toBe(
          'io.example.Bomb/1/a is neither a regular file nor a directory (a FIFO, a socket or a device)',
        );
      }
    } finally {
      closeSync(writer);
    }
  });
});
