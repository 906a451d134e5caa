import { createReadStream, createWriteStream } from 'node:fs';
import {
  chmod,
  copyFile,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  stat,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { promisify } from 'node:util';
import { createGunzip, gunzip } from 'node:zlib';
import { once } from 'node:events';
import { dirname, join, posix, relative, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Unpack } from 'tar';
import yauzl from 'yauzl';
import { throwIfAborted } from '@rigging/core';
import { PackageCacheError } from './errors.js';
import { IntegrityHasher, verifyBuffer, type IntegrityAlgorithm } from './integrity.js';
import { ArchiveBudget, RATIO_FLOOR, type ResolvedLimits } from './limits.js';

/** What a fetcher hands back: the package as a stream, a buffer, or a path (archive or directory). */
export type FetchedPackage =
  | {
      /** The archive bytes (tar, tar.gz or zip). */
      stream: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;
      /** SRI (`sha256-…`, `sha512-…`) the bytes must match. */
      integrity?: string | undefined;
      /** Expected size in bytes, for progress reports. */
      size?: number | undefined;
    }
  | { buffer: Uint8Array; integrity?: string | undefined }
  | {
      /** An archive file, or a directory copied as is (integrity cannot apply to a directory). */
      path: string;
      integrity?: string | undefined;
    };

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

function unsafe(what: string, problem: string, entry?: string): PackageCacheError {
  return new PackageCacheError(
    'package-cache.unsafe_archive',
    `refusing ${what}: ${entry === undefined ? '' : `entry ${JSON.stringify(entry)} `}${problem}`,
    { details: entry === undefined ? { problem } : { problem, entry } },
  );
}

/** Why a relative archive path is unsafe (absolute, escaping with `..`, NUL), or `undefined`. */
export function relativePathProblem(p: string): string | undefined {
  if (p === '') return 'has an empty name';
  if (p.includes('\0')) return 'contains NUL';
  if (p.startsWith('/') || p.startsWith('\\') || /^[A-Za-z]:/.test(p)) return 'is absolute';
  let depth = 0;
  for (const part of p.split(/[\\/]+/)) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      depth--;
      if (depth < 0) return 'escapes the package directory';
    } else depth++;
  }
  return undefined;
}

/** Why a link entry is unsafe, or `undefined`. Symlinks resolve from their directory. */
export function linkProblem(
  entryPath: string,
  linkpath: string,
  kind: 'symlink' | 'hardlink',
): string | undefined {
  if (linkpath === '') return 'is a link to nothing';
  if (kind === 'hardlink') {
    const p = relativePathProblem(linkpath);
    if (p) return `is a hard link that ${p}`;
    if (linkpath.split(/[\\/]+/).includes('..')) return 'is a hard link with ".." in its target';
    return undefined;
  }
  if (linkpath.startsWith('/') || linkpath.startsWith('\\') || /^[A-Za-z]:/.test(linkpath))
    return `is a symlink to an absolute path (${linkpath})`;
  const resolved = posix.join(posix.dirname(entryPath.replace(/\\/g, '/')), linkpath);
  const p = relativePathProblem(resolved);
  return p ? `is a symlink pointing outside (${linkpath})` : undefined;
}

function isGzip(head: Uint8Array): boolean {
  return head[0] === 0x1f && head[1] === 0x8b;
}

function detect(head: Uint8Array): Format | undefined {
  if (isGzip(head)) return 'tar';
  if (head[0] === 0x50 && head[1] === 0x4b && (head[2] === 3 || head[2] === 5)) return 'zip';
  if (head.length >= 262 && Buffer.from(head.subarray(257, 262)).toString('latin1') === 'ustar')
    return 'tar';
  return undefined;
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
    if (format !== 'tar') throw unsupported(what);
    if (st.size <= FAST_FILE_LIMIT) {
      // A local archive of moderate size: read it at once and take the in-memory fast path
      // (hash on the thread pool while the files are written).
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

const zipOptions = { lazyEntries: true, autoClose: false, validateEntrySizes: true } as const;

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
  const head: Uint8Array[] = [];
  let headBytes = 0;
  let ended = false;
  while (headBytes < 512) {
    throwIfAborted(signal);
    const r = await iterator.next();
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
  const headBytesAll = Buffer.concat(head);
  const format = detect(headBytesAll);
  const rest = async function* (): AsyncGenerator<Uint8Array> {
    yield* head;
    if (ended) return;
    for (;;) {
      throwIfAborted(signal);
      const r = await iterator.next();
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
      await untar(rest(), isGzip(headBytesAll), target, budget, signal);
    } catch (error) {
      await iterator.return?.();
      throw error;
    }
    return { integrity: hasher.verify(what) };
  }
  const payload = join(opts.scratch, 'payload');
  const out = createWriteStream(payload, { flags: 'wx' });
  try {
    await pipeline(Readable.from(rest()), out, { signal });
  } catch (error) {
    await iterator.return?.();
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

const TAR_TYPES = new Set([
  'File',
  'OldFile',
  'ContiguousFile',
  'Directory',
  'GNUDumpDir',
  'SymbolicLink',
  'Link',
]);

/** Extracts a tar (gzipped when `gzipped`) through node-tar, checking every entry. */
async function untar(
  chunks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  gzipped: boolean,
  target: string,
  budget: ArchiveBudget,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { what } = budget;
  let refused: PackageCacheError | undefined;
  const unpack = new Unpack({
    cwd: target,
    strict: true,
    preserveOwner: false,
    filter: (path, entry) => {
      if (refused) return false;
      const type = 'type' in entry ? String(entry.type) : 'File';
      let problem: string | undefined;
      if (!TAR_TYPES.has(type)) problem = `is a ${type} (only files, directories and links)`;
      else problem = relativePathProblem(path);
      if (!problem && 'linkpath' in entry && (type === 'SymbolicLink' || type === 'Link')) {
        problem = linkProblem(
          path,
          String(entry.linkpath ?? ''),
          type === 'Link' ? 'hardlink' : 'symlink',
        );
      }
      if (problem) {
        refused = unsafe(what, problem, path);
        return false;
      }
      try {
        budget.entry(path, 'size' in entry && typeof entry.size === 'number' ? entry.size : 0);
      } catch (error) {
        refused = error as PackageCacheError;
        return false;
      }
      return true;
    },
  });
  const done = new Promise<void>((resolve, reject) => {
    unpack.on('close', () => resolve());
    unpack.on('error', (e: unknown) => reject(e));
  });
  done.catch(() => {});
  // Writes the (inflated) tar into node-tar, stopping at the first refused entry.
  const sink = async (tar: AsyncIterable<Uint8Array>): Promise<void> => {
    for await (const chunk of tar) {
      if (refused) break;
      if (!unpack.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
        await Promise.race([once(unpack, 'drain'), done]);
      }
    }
    if (refused) throw refused;
    unpack.end();
    await done;
  };
  try {
    if (gzipped) {
      // Inflate here rather than in node-tar, to account for every inflated byte as it comes.
      await pipeline(
        Readable.from(chunks),
        async function* (compressed: AsyncIterable<Buffer>) {
          for await (const chunk of compressed) {
            budget.compressed(chunk.byteLength);
            yield chunk;
          }
        },
        createGunzip(),
        async function* (inflated: AsyncIterable<Buffer>) {
          for await (const chunk of inflated) {
            budget.inflated(chunk.byteLength);
            yield chunk;
          }
        },
        sink,
        ...(signal ? [{ signal }] : []),
      );
    } else {
      await pipeline(Readable.from(chunks), sink, ...(signal ? [{ signal }] : []));
    }
  } catch (error) {
    if (refused) throw refused;
    if (PackageCacheError.isInstance(error)) throw error;
    if (signal?.aborted) throw signal.reason;
    const e = error as { code?: string; tarCode?: string; message?: string };
    if (e.code === 'TAR_SYMLINK_ERROR' || e.tarCode === 'TAR_ENTRY_ERROR') {
      throw unsafe(what, e.message ?? 'tar refused an entry');
    }
    throw new PackageCacheError(
      'package-cache.unsupported_format',
      `${what}: not a valid tar archive (${e.message ?? String(error)})`,
      { cause: error },
    );
  }
  if (refused) throw refused;
}

const gunzipAsync = promisify(gunzip);
/** Largest inflated archive the in-memory fast path accepts (larger ones stream through node-tar). */
const FAST_GUNZIP_LIMIT = 512 * 1024 * 1024;
const FAST_WRITERS = 8;
/** Archive files up to this size are read into memory and take the fast path. */
const FAST_FILE_LIMIT = 64 * 1024 * 1024;

interface FastEntry {
  path: string;
  dir: boolean;
  mode: number;
  mtime: number;
  start: number;
  size: number;
}

const octal = (h: Buffer, at: number, len: number): number | undefined => {
  if (h[at]! & 0x80) return undefined; // base-256 (huge sizes): leave it to node-tar
  const text = h
    .toString('latin1', at, at + len)
    .replace(/\0.*$/s, '')
    .trim();
  if (text === '') return 0;
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : undefined;
};

/**
 * Lists a plain ustar archive held in memory: regular files and directories only, ustar or GNU
 * headers with valid checksums. `undefined` when anything else shows up (pax or GNU long-name
 * headers, links, base-256 numbers, a truncated body…): the caller then uses node-tar, which
 * handles (or refuses) those. Unsafe paths are refused here, before anything is written.
 */
function scanTar(buf: Buffer, budget: ArchiveBudget): FastEntry[] | undefined {
  const entries: FastEntry[] = [];
  let at = 0;
  while (at + 512 <= buf.length) {
    const h = buf.subarray(at, at + 512);
    if (h.every((b) => b === 0)) return entries;
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!;
    if (octal(h, 148, 8) !== sum) return undefined;
    const magic = h.toString('latin1', 257, 263);
    if (magic !== 'ustar\0' && magic !== 'ustar ') return undefined;
    const type = String.fromCharCode(h[156]!);
    const size = octal(h, 124, 12);
    const mode = octal(h, 100, 8);
    const mtime = octal(h, 136, 12);
    if (size === undefined || mode === undefined || mtime === undefined) return undefined;
    const name = h.toString('utf8', 0, 100).replace(/\0.*$/s, '');
    const prefix = magic === 'ustar\0' ? h.toString('utf8', 345, 500).replace(/\0.*$/s, '') : '';
    const path = prefix === '' ? name : `${prefix}/${name}`;
    const start = at + 512;
    if (start + size > buf.length || path.includes('\\')) return undefined;
    let dir: boolean;
    if (type === '5') dir = true;
    else if ((type === '0' || type === '\0' || type === '7') && !path.endsWith('/')) dir = false;
    else return undefined;
    const problem = relativePathProblem(path);
    if (problem) throw unsafe(budget.what, problem, path);
    budget.entry(path, size);
    entries.push({ path, dir, mode, mtime, start, size });
    at = start + Math.ceil(size / 512) * 512;
  }
  return undefined; // no end-of-archive block: let node-tar judge
}

/**
 * Fast path for an archive already in memory (a buffer fetch): a plain tar, or a gzipped one
 * inflated on the thread pool, is written with one `writeFile` per file, several at a time,
 * instead of streaming through node-tar in small chunks. Returns false when the archive needs
 * node-tar (see `scanTar`), leaving `target` empty.
 */
async function untarBuffer(
  archive: Buffer,
  target: string,
  streaming: ArchiveBudget,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  const budget = streaming.fresh(); // this pass may be abandoned for node-tar's
  let buf = archive;
  if (isGzip(buf)) {
    const { maxExpandedBytes, maxRatio } = budget.limits;
    // Never inflate in memory past what the limits would let through (node-tar then refuses it).
    const bound = Math.min(
      FAST_GUNZIP_LIMIT,
      maxExpandedBytes + 1024 * 1024,
      Math.max(RATIO_FLOOR, maxRatio * buf.length),
    );
    try {
      buf = await gunzipAsync(buf, { maxOutputLength: Math.floor(bound) });
    } catch {
      return false; // corrupt or too large: node-tar reports or streams it
    }
    budget.compressed(archive.length);
    budget.inflated(buf.length);
  }
  const entries = scanTar(buf, budget);
  if (!entries) return false;
  throwIfAborted(signal);
  const dirs = new Map<string, number>();
  for (const e of entries) {
    const rel = posix.normalize(e.path).replace(/\/+$/, '');
    if (e.dir) dirs.set(rel, e.mode);
    else {
      const parent = posix.dirname(rel);
      if (parent !== '.' && !dirs.has(parent)) dirs.set(parent, 0o755);
    }
  }
  try {
    for (const [rel, mode] of [...dirs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (rel === '.' || rel === '') continue;
      await mkdir(join(target, rel), { recursive: true, mode: (mode & 0o777) | 0o700 });
    }
    const files = entries.filter((e) => !e.dir);
    let next = 0;
    const writer = async () => {
      while (next < files.length) {
        throwIfAborted(signal);
        const e = files[next++]!;
        const dest = join(target, e.path);
        const perm = e.mode & 0o777;
        await writeFile(dest, buf.subarray(e.start, e.start + e.size), {
          mode: perm === 0 ? 0o644 : perm,
        });
        if (perm !== 0) await chmod(dest, perm);
        await utimes(dest, e.mtime, e.mtime);
      }
    };
    // Settle every writer before judging (a failed layout is then removed with nobody writing).
    const results = await Promise.allSettled(
      Array.from({ length: Math.min(FAST_WRITERS, files.length) }, writer),
    );
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    for (const e of entries) if (e.dir) await utimes(join(target, e.path), e.mtime, e.mtime);
  } catch {
    if (signal?.aborted) throw signal.reason;
    // Odd layouts (a file where a directory goes…): start over with node-tar.
    await rm(target, { recursive: true, force: true });
    await mkdir(target);
    return false;
  }
  return true;
}

type ZipOpen = (cb: (err: Error | null, zip: yauzl.ZipFile) => void) => void;

/** Extracts a zip of `archiveSize` bytes, entry by entry, checking each before writing it. */
async function extractZip(
  openZip: ZipOpen,
  target: string,
  budget: ArchiveBudget,
  archiveSize: number,
): Promise<void> {
  const { what } = budget;
  const zip = await new Promise<yauzl.ZipFile>((resolve, reject) => {
    openZip((err, z) => (err ? reject(zipError(err, what)) : resolve(z)));
  });
  try {
    if (zip.entryCount > budget.limits.maxEntries) {
      throw new PackageCacheError(
        'package-cache.too_many_entries',
        `refusing ${what}: ${zip.entryCount} entries (limit maxEntries ${budget.limits.maxEntries})`,
        {
          details: { limit: 'maxEntries', max: budget.limits.maxEntries, entries: zip.entryCount },
        },
      );
    }
    await new Promise<void>((resolve, reject) => {
      zip.on('error', (e: Error) => reject(zipError(e, what)));
      zip.on('end', () => resolve());
      zip.on('entry', (entry: yauzl.Entry) => {
        zipEntry(zip, entry, target, budget, archiveSize).then(
          () => zip.readEntry(),
          (e: unknown) => reject(e),
        );
      });
      zip.readEntry();
    });
  } finally {
    zip.close();
  }
}

function zipError(e: Error, what: string): PackageCacheError {
  if (/relative path|absolute path|invalid characters|backslash/i.test(e.message)) {
    return unsafe(what, e.message);
  }
  return new PackageCacheError(
    'package-cache.unsupported_format',
    `${what}: not a valid zip archive (${e.message})`,
    { cause: e },
  );
}

async function zipEntry(
  zip: yauzl.ZipFile,
  entry: yauzl.Entry,
  target: string,
  budget: ArchiveBudget,
  archiveSize: number,
): Promise<void> {
  const { what } = budget;
  const name = entry.fileName;
  const problem = relativePathProblem(name);
  if (problem) throw unsafe(what, problem, name);
  // Declared sizes are enforced by yauzl (validateEntrySizes) while the entry streams.
  budget.entry(name, entry.uncompressedSize);
  budget.inflated(entry.uncompressedSize, archiveSize);
  const unix = entry.versionMadeBy >> 8 === 3;
  const mode = unix ? (entry.externalFileAttributes >>> 16) & 0xffff : 0;
  const type = mode & 0o170000;
  const dest = join(target, name);
  await ensureNoSymlinkParents(target, name, what);
  if (name.endsWith('/') || type === 0o040000) {
    await mkdir(dest, { recursive: true });
    return;
  }
  if (type === 0o120000) {
    const linkpath = (await readAll(await openEntry(zip, entry))).toString('utf8');
    const lp = linkProblem(name, linkpath, 'symlink');
    if (lp) throw unsafe(what, lp, name);
    await mkdir(dirname(dest), { recursive: true });
    await symlink(linkpath, dest);
    return;
  }
  if (type !== 0 && type !== 0o100000) {
    throw unsafe(what, 'is a device, FIFO or socket', name);
  }
  await mkdir(dirname(dest), { recursive: true });
  const perm = mode & 0o777;
  await pipeline(
    await openEntry(zip, entry),
    createWriteStream(dest, { flags: 'wx', mode: perm === 0 ? 0o644 : perm }),
  );
}

function openEntry(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<Readable> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(entry, (err, stream) => (err ? reject(err) : resolve(stream)));
  });
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of stream) {
    chunks.push(c as Buffer);
    n += (c as Buffer).length;
    if (n > 4096) throw new TypeError('symlink target too long');
  }
  return Buffer.concat(chunks);
}

/** Refuses to write through a symlink in an entry's parent directories. */
async function ensureNoSymlinkParents(root: string, rel: string, what: string): Promise<void> {
  const parts = rel.split(/[\\/]+/).filter((p) => p !== '' && p !== '.');
  let cur = root;
  for (const part of parts.slice(0, -1)) {
    cur = join(cur, part);
    try {
      const st = await lstat(cur);
      if (st.isSymbolicLink()) throw unsafe(what, 'would be written through a symlink', rel);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
  }
}

/** Copies a directory tree; symlinks must stay inside, anything but files/dirs/links refused. */
async function copyTree(
  from: string,
  to: string,
  budget: ArchiveBudget,
  signal: AbortSignal | undefined,
  rel = '',
): Promise<void> {
  const { what } = budget;
  for (const d of await readdir(from, { withFileTypes: true })) {
    throwIfAborted(signal);
    const src = join(from, d.name);
    const dst = join(to, d.name);
    const r = rel === '' ? d.name : `${rel}/${d.name}`;
    budget.entry(r, d.isFile() ? (await lstat(src)).size : 0);
    if (d.isDirectory()) {
      await mkdir(dst);
      await copyTree(src, dst, budget, signal, r);
    } else if (d.isFile()) {
      await copyFile(src, dst);
    } else if (d.isSymbolicLink()) {
      const linkpath = await readlink(src);
      const lp = linkProblem(r, linkpath, 'symlink');
      if (lp) throw unsafe(what, lp, r);
      await symlink(linkpath, dst);
    } else {
      throw unsafe(what, 'is a device, FIFO or socket', r);
    }
  }
}

/**
 * Final pass over an extracted tree: every symlink must resolve inside it, set-id bits are
 * cleared, files and directories are fsynced (when `durable`), and the byte size is summed.
 */
export async function finalizeTree(
  root: string,
  options: { durable: boolean; what: string },
): Promise<number> {
  let realRoot: string | undefined; // resolved at the first symlink (a thread-pool trip saved)
  let size = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const d of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, d.name);
      if (d.isDirectory()) {
        await walk(p);
      } else if (d.isSymbolicLink()) {
        let real: string;
        try {
          real = await realpath(p);
        } catch {
          throw unsafe(options.what, 'is a dangling or looping symlink', relative(root, p));
        }
        realRoot ??= await realpath(root);
        if (real !== realRoot && !real.startsWith(realRoot + sep)) {
          throw unsafe(options.what, 'is a symlink resolving outside', relative(root, p));
        }
        size += (await lstat(p)).size;
      } else if (d.isFile()) {
        const st = await lstat(p);
        size += st.size;
        if (st.mode & 0o7000) await chmod(p, st.mode & 0o777);
        if (options.durable) await fsyncPath(p);
      } else {
        throw unsafe(options.what, 'is a device, FIFO or socket', relative(root, p));
      }
    }
    if (options.durable) await fsyncPath(dir);
  };
  await walk(root);
  return size;
}

/** fsyncs a file or directory. */
export async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
