import { createWriteStream } from 'node:fs';
import { lstat, mkdir, symlink } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { crc32 } from 'node:zlib';
import yauzl from 'yauzl';
import { PackageCacheError } from './errors.js';
import { ArchiveBudget } from './limits.js';
import { corrupt, linkProblem, relativePathProblem, unsafe } from './entry-checks.js';

// Zip extraction with yauzl, entry by entry.

/** How yauzl opens zips: entry by entry, declared sizes enforced. @internal */
export const zipOptions = {
  lazyEntries: true,
  autoClose: false,
  validateEntrySizes: true,
} as const;

/** Opens the zip (from a file or a buffer). @internal */
export type ZipOpen = (cb: (err: Error | null, zip: yauzl.ZipFile) => void) => void;

/** The fields of a local file header that yauzl reads (its types omit the method). */
interface LocalFileHeader {
  generalPurposeBitFlag: number;
  compressionMethod: number;
  crc32: number;
  compressedSize: number;
  uncompressedSize: number;
  fileName: Buffer;
}

type ZipFileWithHeaders = yauzl.ZipFile & {
  readLocalFileHeader(
    entry: yauzl.Entry,
    cb: (err: Error | null, header: LocalFileHeader) => void,
  ): void;
};

/** A 32-bit size field that defers to a zip64 extra field. */
const ZIP64_MARKER = 0xffffffff;
/** General purpose flag: sizes and CRC follow the data in a descriptor (the local header has 0). */
const DATA_DESCRIPTOR = 0x8;

/**
 * Extracts a zip of `archiveSize` bytes, entry by entry, checking each before writing it and its
 * CRC-32 after. Whatever the zip reader or the inflater reports becomes a `package-cache.*` error
 * naming the entry relative to the package. @internal
 */
export async function extractZip(
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
    const seen = new Set<string>();
    await new Promise<void>((resolve, reject) => {
      zip.on('error', (e: Error) => reject(zipError(e, what)));
      zip.on('end', () => resolve());
      zip.on('entry', (entry: yauzl.Entry) => {
        zipEntry(zip as ZipFileWithHeaders, entry, target, budget, archiveSize, seen).then(
          () => zip.readEntry(),
          (e: unknown) => reject(entryError(e, what, entry.fileName)),
        );
      });
      zip.readEntry();
    });
  } finally {
    zip.close();
  }
}

/** Whether `e` comes from the file system (it then names a server path, and is not the zip's fault). */
function isSystemError(e: unknown): e is NodeJS.ErrnoException {
  return typeof (e as NodeJS.ErrnoException | null)?.syscall === 'string';
}

/** What the zip reader says about the archive as a whole. */
function zipError(e: Error, what: string): Error {
  if (isSystemError(e)) return e;
  if (/relative path|absolute path|invalid characters|backslash/i.test(e.message)) {
    return unsafe(what, e.message);
  }
  return corrupt(what, e.message);
}

/**
 * What went wrong while writing `entry`: the package's own errors pass; a clash with an earlier
 * entry (a file where a directory is, or the reverse) is unsafe; what the zip reader or the
 * inflater reports (sizes that disagree, a truncated body, bad deflate data) is corruption; other
 * file-system errors are the server's and pass as they are.
 */
function entryError(e: unknown, what: string, entry: string): unknown {
  if (PackageCacheError.isInstance(e)) return e;
  if (isSystemError(e)) {
    if (e.code === 'EEXIST' || e.code === 'ENOTDIR' || e.code === 'EISDIR') {
      return unsafe(
        what,
        'clashes with another entry (a file where a directory is, or the reverse)',
        entry,
      );
    }
    return e;
  }
  return corrupt(what, e instanceof Error ? e.message : String(e), entry);
}

/** Refuses an entry whose local header says something else than the central directory. */
function checkLocalHeader(entry: yauzl.Entry, local: LocalFileHeader): string | undefined {
  const central = entry as yauzl.Entry & { fileNameRaw?: Buffer };
  if (central.fileNameRaw && !local.fileName.equals(central.fileNameRaw)) {
    return 'its local header names another file than the central directory';
  }
  if (local.compressionMethod !== entry.compressionMethod) {
    return 'its local header gives another compression method than the central directory';
  }
  if (local.generalPurposeBitFlag & DATA_DESCRIPTOR) return undefined;
  const fields = [
    ['CRC-32', local.crc32, entry.crc32],
    ['compressed size', local.compressedSize, entry.compressedSize],
    ['uncompressed size', local.uncompressedSize, entry.uncompressedSize],
  ] as const;
  for (const [name, inLocal, inCentral] of fields) {
    if (name !== 'CRC-32' && inLocal === ZIP64_MARKER) continue;
    if (inLocal !== inCentral) {
      return `its local header gives ${name} ${inLocal}, the central directory ${inCentral}`;
    }
  }
  return undefined;
}

async function zipEntry(
  zip: ZipFileWithHeaders,
  entry: yauzl.Entry,
  target: string,
  budget: ArchiveBudget,
  archiveSize: number,
  seen: Set<string>,
): Promise<void> {
  const { what } = budget;
  const name = entry.fileName;
  const problem = relativePathProblem(name);
  if (problem) throw unsafe(what, problem, name);
  const key = posix.normalize(name.replace(/\\/g, '/')).replace(/\/+$/, '');
  if (seen.has(key)) throw unsafe(what, 'appears twice', name);
  seen.add(key);
  // Declared sizes are enforced by yauzl (validateEntrySizes) while the entry streams.
  budget.entry(name, entry.uncompressedSize);
  budget.inflated(entry.uncompressedSize, archiveSize);
  const local = await new Promise<LocalFileHeader>((resolve, reject) => {
    zip.readLocalFileHeader(entry, (err, header) => (err ? reject(err) : resolve(header)));
  });
  const mismatch = checkLocalHeader(entry, local);
  if (mismatch) throw corrupt(what, mismatch, name);
  const unix = entry.versionMadeBy >> 8 === 3;
  const mode = unix ? (entry.externalFileAttributes >>> 16) & 0xffff : 0;
  const type = mode & 0o170000;
  const dest = join(target, name);
  await ensureNoSymlinkParents(target, name, what);
  if (name.endsWith('/') || type === 0o040000) {
    if (entry.uncompressedSize !== 0) throw corrupt(what, 'a directory with contents', name);
    await mkdir(dest, { recursive: true });
    return;
  }
  if (type === 0o120000) {
    const check = new Crc32Check(entry.crc32);
    const bytes = await readShort(await openEntry(zip, entry), check, 4096);
    if (!bytes) throw unsafe(what, 'is a symlink whose target is longer than 4096 bytes', name);
    check.verify(what, name);
    const linkpath = bytes.toString('utf8');
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
  const check = new Crc32Check(entry.crc32);
  await pipeline(
    await openEntry(zip, entry),
    check.stream(),
    createWriteStream(dest, { flags: 'wx', mode: perm === 0 ? 0o644 : perm }),
  );
  check.verify(what, name);
}

/** The CRC-32 of an entry's bytes as they pass, checked against the central directory's. */
class Crc32Check {
  #crc = 0;

  constructor(readonly expected: number) {}

  update(chunk: Buffer): void {
    this.#crc = crc32(chunk, this.#crc);
  }

  /** A pass-through stream that hashes what goes through it. */
  stream(): Transform {
    return new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        this.update(chunk);
        done(null, chunk);
      },
    });
  }

  /** Throws `package-cache.corrupt_archive` when the bytes do not match. */
  verify(what: string, entry: string): void {
    const actual = this.#crc >>> 0;
    if (actual !== this.expected >>> 0) {
      const hex = (n: number) => n.toString(16).padStart(8, '0');
      throw corrupt(
        what,
        `CRC-32 ${hex(actual)} of its bytes does not match ${hex(this.expected >>> 0)}`,
        entry,
      );
    }
  }
}

function openEntry(zip: yauzl.ZipFile, entry: yauzl.Entry): Promise<Readable> {
  return new Promise((resolve, reject) => {
    zip.openReadStream(entry, (err, stream) => (err ? reject(err) : resolve(stream)));
  });
}

/** The bytes of a short entry (a symlink's target), or undefined past `max` bytes. */
async function readShort(
  stream: Readable,
  check: Crc32Check,
  max: number,
): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of stream) {
    const chunk = c as Buffer;
    check.update(chunk);
    chunks.push(chunk);
    n += chunk.length;
    if (n > max) {
      stream.destroy();
      return undefined;
    }
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
