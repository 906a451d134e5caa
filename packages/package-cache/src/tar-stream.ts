import { createGunzip } from 'node:zlib';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Unpack } from 'tar';
import { PackageCacheError } from './errors.js';
import { ArchiveBudget } from './limits.js';
import { linkProblem, relativePathProblem, unsafe } from './entry-checks.js';

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
