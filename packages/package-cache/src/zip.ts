import { createWriteStream } from 'node:fs';
import { lstat, mkdir, symlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import { PackageCacheError } from './errors.js';
import { ArchiveBudget } from './limits.js';
import { linkProblem, relativePathProblem, unsafe } from './entry-checks.js';

// Zip extraction with yauzl, entry by entry.

/** How yauzl opens zips: entry by entry, declared sizes enforced. @internal */
export const zipOptions = {
  lazyEntries: true,
  autoClose: false,
  validateEntrySizes: true,
} as const;

/** Opens the zip (from a file or a buffer). @internal */
export type ZipOpen = (cb: (err: Error | null, zip: yauzl.ZipFile) => void) => void;

/**
 * Extracts a zip of `archiveSize` bytes, entry by entry, checking each before writing it. @internal
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
