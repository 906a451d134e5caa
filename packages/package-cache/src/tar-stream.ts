import { once } from 'node:events';
import { Gunzip } from 'minizlib';
import { Unpack } from 'tar';
import { throwIfAborted } from '@rigging/core';
import { PackageCacheError } from './errors.js';
import { ArchiveBudget } from './limits.js';
import { corrupt, linkProblem, relativePathProblem, unsafe, withoutDir } from './entry-checks.js';

// Tar (and tar.gz) extraction through node-tar, for streams and archives the fast path declines.

const TAR_TYPES = new Set([
  'File',
  'OldFile',
  'ContiguousFile',
  'Directory',
  'GNUDumpDir',
  'SymbolicLink',
  'Link',
]);

/** Extracts a tar (gzipped when `gzipped`) through node-tar, checking every entry. @internal */
export async function untar(
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
  // node-tar writes the entries it accepted on the thread pool while it parses the next ones:
  // `settled` is its last pending write done ('close'), or node-tar giving up ('abort').
  const settled = new Promise<void>((resolve) => {
    unpack.on('close', () => resolve());
    unpack.on('abort', () => resolve());
  });
  const done = new Promise<void>((resolve, reject) => {
    void settled.then(resolve);
    unpack.on('error', (e: unknown) => reject(e));
  });
  done.catch(() => {});
  let ended = false;
  let failure: unknown;
  try {
    // A gzipped tar is inflated here rather than in node-tar, to account for every inflated byte.
    for await (const chunk of gzipped ? inflate(chunks, budget) : chunks) {
      throwIfAborted(signal);
      if (refused) break;
      if (!unpack.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
        await Promise.race([once(unpack, 'drain'), done]);
      }
    }
    if (!refused) {
      ended = true;
      unpack.end();
      await done;
    }
  } catch (error) {
    failure = error;
  }
  if (!refused && failure === undefined) return;
  // Stopped early: the rest of the archive is skipped or cut short, and nothing is thrown before
  // the entries already accepted are written, or the caller's removal of `target` could race a
  // file being created in it.
  if (!ended) unpack.end();
  await settled;
  if (refused) throw refused;
  if (PackageCacheError.isInstance(failure)) throw failure;
  if (signal?.aborted) throw signal.reason;
  throw tarError(failure, what, target);
}

/**
 * What node-tar or the inflater reports, as a `package-cache.*` error whose message names the
 * entry relative to the package: an entry it could not write (a hard link to a file the archive
 * does not hold, a write through a symlink) is unsafe; a damaged gzip (bad CRC-32, cut short) or
 * a truncated tar is corrupt; anything else is not a tar it can read.
 */
function tarError(error: unknown, what: string, target: string): PackageCacheError {
  const e = error as {
    code?: string;
    tarCode?: string;
    syscall?: string;
    message?: string;
    entry?: { path?: unknown };
  };
  const entry = typeof e.entry?.path === 'string' ? e.entry.path : undefined;
  const message = withoutDir(e.message ?? String(error), target);
  if (e.code === 'TAR_SYMLINK_ERROR' || e.tarCode === 'TAR_ENTRY_ERROR') {
    const problem =
      e.syscall !== undefined ? `cannot be extracted (${e.syscall}: ${e.code})` : message;
    return unsafe(what, problem, entry);
  }
  if (/^Z_/.test(e.code ?? '') || (e.tarCode === 'TAR_BAD_ARCHIVE' && /truncated/i.test(message))) {
    return corrupt(what, message);
  }
  return new PackageCacheError(
    'package-cache.unsupported_format',
    `${what}: not a valid tar archive (${message})`,
    { cause: error },
  );
}

/** Largest slice of compressed bytes inflated at once (deflate expands at most ~1032×). */
const INFLATE_SLICE = 16 * 1024;

/**
 * Inflates gzip chunks, accounting for every compressed and inflated byte in `budget`, which
 * throws as soon as the ratio is exceeded: the input is fed in small slices, so a bomb never
 * inflates more than ~16 MiB past that point. minizlib inflates on this thread, as node-tar does
 * (a thread-pool trip per chunk, as with Node's streaming zlib, costs more than the inflation).
 */
async function* inflate(
  chunks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  budget: ArchiveBudget,
): AsyncGenerator<Buffer> {
  const out: Buffer[] = [];
  let failed: unknown;
  const gunzip = new Gunzip({});
  gunzip.on('data', (chunk: Buffer) => out.push(chunk));
  gunzip.on('error', (error: unknown) => (failed ??= error));
  const drain = function* (): Generator<Buffer> {
    if (failed !== undefined) throw failed;
    for (let chunk = out.shift(); chunk; chunk = out.shift()) {
      budget.inflated(chunk.byteLength);
      yield chunk;
    }
  };
  for await (const chunk of chunks) {
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    for (let at = 0; at < bytes.length; at += INFLATE_SLICE) {
      const slice = bytes.subarray(at, at + INFLATE_SLICE);
      budget.compressed(slice.byteLength);
      gunzip.write(slice);
      yield* drain();
    }
  }
  gunzip.end();
  yield* drain();
}
