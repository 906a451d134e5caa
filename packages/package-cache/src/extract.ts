import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import { raceAbort, throwIfAborted } from '@rigging/core';
import { PackageCacheError } from './errors.js';
import { IntegrityHasher, verifyBuffer, type IntegrityAlgorithm } from './integrity.js';
import { ArchiveBudget, type ResolvedLimits } from './limits.js';
import type { FetchedPackage } from './types.js';
import { untar } from './tar-stream.js';
import { isGzip, untarBuffer } from './tar-fast.js';
import { copyTree } from './tree.js';
import { extractZip, zipOptions, type ZipOpen } from './zip.js';

/** Options of {@link materialize}. @internal */
export interface MaterializeOptions {
  /** Directory to extract into (must not exist yet). */
  target: string;
  /** Scratch directory for a spooled payload. */
  scratch: string;
  /** Algorithm of the integrity computed when none is expected (`'none'`: do not hash). */
  algorithm: IntegrityAlgorithm | 'none';
  signal?: AbortSignal | undefined;
  /** Called with the running byte count of the payload. */
  onBytes?: ((received: number) => void) | undefined;
  /** Name used in error messages. */
  what: string;
  /** Bounds on the archive and on what it expands to. */
  limits: ResolvedLimits;
}

type Format = 'tar' | 'zip';

/** Archive files up to this size are read into memory and take the fast path. */
const FAST_FILE_LIMIT = 64 * 1024 * 1024;

function detect(head: Uint8Array): Format | undefined {
  if (isGzip(head)) return 'tar';
  if (head[0] === 0x50 && head[1] === 0x4b && (head[2] === 3 || head[2] === 5)) return 'zip';
  // A head shorter than 262 bytes reads fewer than five characters there: never `ustar`.
  if (Buffer.from(head.subarray(257, 262)).toString('latin1') === 'ustar') return 'tar';
  return undefined;
}

function notAFile(what: string): PackageCacheError {
  return new PackageCacheError(
    'package-cache.unsupported_format',
    `${what} is neither a regular file nor a directory (a FIFO, a socket or a device)`,
  );
}

function unsupported(what: string): PackageCacheError {
  return new PackageCacheError(
    'package-cache.unsupported_format',
    `${what} is neither a tar (optionally gzipped) nor a zip archive`,
  );
}

/**
 * Turns a fetched package into a directory at `opts.target`: hashes the bytes (verifying the
 * integrity when one is given), extracts tar/tgz/zip archives refusing unsafe entries, or copies
 * a directory. Returns the SRI of the bytes (undefined for a directory). On error the target may
 * hold a partial tree: the caller owns (and removes) it.
 * @internal
 */
export async function materialize(
  fetched: FetchedPackage,
  opts: MaterializeOptions,
): Promise<{ integrity: string | undefined }> {
  const { target, signal, what } = opts;
  throwIfAborted(signal);
  const budget = new ArchiveBudget(opts.limits, what);
  if ('path' in fetched) {
    const st = await stat(fetched.path);
    if (st.isDirectory()) {
      if (fetched.integrity !== undefined) {
        throw new TypeError(`integrity cannot be checked for a directory (${fetched.path})`);
      }
      await mkdir(target);
      await copyTree(fetched.path, target, budget, signal);
      return { integrity: undefined };
    }
    // A FIFO with no writer would block the open for good, out of reach of any abort (a socket or
    // a device is no package file either): refused before it is opened.
    if (!st.isFile()) throw notAFile(what);
    budget.archiveBytes(st.size);
    const head = await readHead(fetched.path);
    const format = detect(head);
    if (format === 'zip') {
      const hasher = new IntegrityHasher(fetched.integrity, opts.algorithm);
      for await (const chunk of createReadStream(fetched.path, { signal })) {
        hasher.update(chunk as Buffer);
        opts.onBytes?.(hasher.bytes);
      }
      const integrity = hasher.verify(what);
      await mkdir(target);
      await extractZip((cb) => yauzl.open(fetched.path, zipOptions, cb), target, budget, st.size);
      return { integrity };
    }
    // A tar, or bytes that are no archive, which are read too: as in the other forms, they are
    // refused only once their integrity is checked (a mismatch explains them best).
    if (st.size <= FAST_FILE_LIMIT) {
      // A file of moderate size: read it at once and take the in-memory fast path (hash on the
      // thread pool while the files are written).
      const buffer = await readFile(fetched.path, { signal });
      return materialize({ buffer, integrity: fetched.integrity }, opts);
    }
    return streamTar(createReadStream(fetched.path, { signal }), fetched.integrity, opts, budget);
  }
  if ('buffer' in fetched) {
    const buffer = Buffer.from(
      fetched.buffer.buffer,
      fetched.buffer.byteOffset,
      fetched.buffer.byteLength,
    );
    budget.archiveBytes(buffer.length);
    // Hash on the thread pool while extracting; nothing is visible until the caller renames.
    const verified = verifyBuffer(buffer, fetched.integrity, what, opts.algorithm);
    verified.catch(() => {});
    opts.onBytes?.(buffer.length);
    const format = detect(buffer);
    if (format === undefined) {
      await verified;
      throw unsupported(what);
    }
    await mkdir(target);
    try {
      if (format === 'zip') {
        const open: ZipOpen = (cb) => yauzl.fromBuffer(buffer, zipOptions, cb);
        await extractZip(open, target, budget, buffer.length);
      } else if (!(await untarBuffer(buffer, target, budget, signal))) {
        await untar([buffer], isGzip(buffer), target, budget, signal);
      }
    } catch (error) {
      await verified; // an integrity mismatch explains a broken archive best
      throw error;
    }
    return { integrity: await verified };
  }
  const source: AsyncIterable<Uint8Array> = isWebStream(fetched.stream)
    ? (Readable.fromWeb(
        fetched.stream as import('node:stream/web').ReadableStream,
      ) as AsyncIterable<Uint8Array>)
    : fetched.stream;
  if (fetched.size !== undefined) budget.archiveBytes(fetched.size);
  return streamTar(source, fetched.integrity, opts, budget);
}

function isWebStream(s: unknown): s is ReadableStream<Uint8Array> {
  return typeof (s as { getReader?: unknown }).getReader === 'function';
}

async function readHead(path: string): Promise<Uint8Array> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(512);
    const { bytesRead } = await fh.read(buf, 0, 512, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/**
 * Streams bytes: a tar (or tgz) goes straight into the extractor while being hashed, so the
 * payload is written once; anything else is spooled to a scratch file (zip needs random access).
 */
async function streamTar(
  source: AsyncIterable<Uint8Array>,
  expected: string | undefined,
  opts: MaterializeOptions,
  budget: ArchiveBudget,
): Promise<{ integrity: string | undefined }> {
  const { target, signal, what } = opts;
  const hasher = new IntegrityHasher(expected, opts.algorithm);
  const iterator = source[Symbol.asyncIterator]();
  // Each read races the signal: a stream that stalls cannot hold the install past an abort.
  let reading = false; // a read the stream has not answered (given up on, or cut by a failed write)
  const read = async (): Promise<IteratorResult<unknown>> => {
    throwIfAborted(signal);
    reading = true;
    const r = await raceAbort(iterator.next(), signal);
    reading = false;
    return r;
  };
  /** Closes the fetcher's stream when extraction stops early. */
  const close = async (): Promise<void> => {
    if (!reading) {
      await iterator.return?.();
      return;
    }
    // An async iterator runs `return()` only once its pending read is answered, which a stalled
    // stream never does: a Node stream (a web stream comes as one) is destroyed at once; an async
    // generator closes as soon as its pending read settles, without the install waiting for it.
    (source as { destroy?: () => void }).destroy?.();
    iterator.return?.().catch(() => {});
  };
  const head: Uint8Array[] = [];
  let headBytes = 0;
  let ended = false;
  try {
    while (headBytes < 512) {
      const r = await read();
      if (r.done) {
        ended = true;
        break;
      }
      const chunk = toU8(r.value);
      hasher.update(chunk);
      budget.archiveBytes(hasher.bytes);
      opts.onBytes?.(hasher.bytes);
      head.push(chunk);
      headBytes += chunk.byteLength;
    }
  } catch (error) {
    await close(); // the fetcher's stream is closed, not left hanging
    throw error;
  }
  const headBuffer = Buffer.concat(head);
  const format = detect(headBuffer);
  const rest = async function* (): AsyncGenerator<Uint8Array> {
    yield* head;
    if (ended) return;
    for (;;) {
      const r = await read();
      if (r.done) return;
      const chunk = toU8(r.value);
      hasher.update(chunk);
      budget.archiveBytes(hasher.bytes);
      opts.onBytes?.(hasher.bytes);
      yield chunk;
    }
  };
  if (format === 'tar') {
    await mkdir(target);
    try {
      await untar(rest(), isGzip(headBuffer), target, budget, signal);
    } catch (error) {
      await close();
      throw error;
    }
    return { integrity: hasher.verify(what) };
  }
  const payload = join(opts.scratch, 'payload');
  const out = createWriteStream(payload, { flags: 'wx' });
  try {
    await pipeline(Readable.from(rest()), out, { signal });
  } catch (error) {
    await close();
    throw error;
  }
  const integrity = hasher.verify(what);
  if (format !== 'zip') throw unsupported(what);
  await mkdir(target);
  await extractZip((cb) => yauzl.open(payload, zipOptions, cb), target, budget, hasher.bytes);
  return { integrity };
}

function toU8(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return Buffer.from(value);
  throw new TypeError(`a package stream must yield Uint8Array chunks, got ${typeof value}`);
}
