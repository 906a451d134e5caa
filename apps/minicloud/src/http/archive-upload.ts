/**
 * Package uploads as archives (`POST /api/packages/{fqn}/{version}/archive`): the bytes are
 * extracted by a scratch `@rigging/package-cache` under `<dataDir>/uploads`, which enforces the
 * archive bounds (size, expanded size, entries, compression ratio, paths that escape, links)
 * while streaming, so a refused archive leaves nothing behind; the files of an accepted one go
 * to the repository and the scratch copy is removed.
 */
import { randomBytes } from 'node:crypto';
import { lstat, readdir, readFile, rmdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { PackageCache, type ArchiveLimits } from '@rigging/package-cache';
import type { PackageFile } from '../cloud/index.js';
import { HttpError } from './errors.js';

/** The bounds on an uploaded archive (well inside the repository's own 64 MiB). */
export const UPLOAD_LIMITS: Readonly<Required<ArchiveLimits>> = Object.freeze({
  maxArchiveBytes: 16 * 1024 * 1024,
  maxExpandedBytes: 32 * 1024 * 1024,
  maxEntries: 1000,
  maxRatio: 200,
  maxPathDepth: 16,
  maxNameLength: 100,
});

/** Unpacks uploaded archives within {@link UPLOAD_LIMITS}. */
export class ArchiveUploads {
  readonly #pending = new Map<string, Uint8Array>();
  #cache: Promise<PackageCache> | undefined;

  /** @param root scratch directory (created on first use) */
  constructor(readonly root: string) {}

  #open(): Promise<PackageCache> {
    this.#cache ??= PackageCache.open({
      root: this.root,
      limits: UPLOAD_LIMITS,
      durable: false,
      integrityAlgorithm: 'none',
      fetch: async (ref) => {
        const bytes = this.#pending.get(ref.id);
        if (!bytes) throw new Error(`no pending upload ${ref.id}`);
        return { buffer: bytes };
      },
    });
    return this.#cache;
  }

  /** The files of `archive` (tar, tar.gz or zip), or a refusal naming the bound it crossed. */
  async unpack(fqn: string, version: string, archive: Uint8Array): Promise<PackageFile[]> {
    const cache = await this.#open();
    const ref = { fqn, version, id: `upload-${randomBytes(8).toString('hex')}` };
    this.#pending.set(ref.id, archive);
    try {
      const pkg = await cache.acquire(ref);
      try {
        return await readTree(pkg.path);
      } finally {
        await pkg.release();
        await cache.remove(ref);
      }
    } finally {
      this.#pending.delete(ref.id);
      // The cache leaves `<fqn>/<version>` behind, empty: remove them unless another upload uses them.
      for (const dir of [join(this.root, fqn, version), join(this.root, fqn)]) {
        await rmdir(dir).catch(() => undefined);
      }
    }
  }

  /** Closes the scratch cache. */
  async close(): Promise<void> {
    if (this.#cache) await (await this.#cache).close();
  }
}

/** Every regular file under `root`, with `/`-separated relative paths; links are refused. */
async function readTree(root: string): Promise<PackageFile[]> {
  const files: PackageFile[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const name of await readdir(dir)) {
      const path = join(dir, name);
      const s = await lstat(path);
      if (s.isDirectory()) await walk(path);
      else if (s.isFile()) {
        files.push({
          path: relative(root, path).split(sep).join('/'),
          content: await readFile(path),
        });
      } else {
        throw new HttpError(
          400,
          'minicloud.unsafe_archive',
          `the archive holds ${relative(root, path)}, which is not a regular file or directory`,
        );
      }
    }
  };
  await walk(root);
  if (files.length === 0) {
    throw new HttpError(400, 'minicloud.invalid_input', 'the archive holds no files');
  }
  return files;
}
