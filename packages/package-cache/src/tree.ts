import {
  chmod,
  copyFile,
  lstat,
  mkdir,
  open,
  readdir,
  readlink,
  realpath,
  symlink,
} from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { throwIfAborted } from '@rigging/core';
import { ArchiveBudget } from './limits.js';
import { linkProblem, unsafe } from './entry-checks.js';

// Directory trees: copying a fetched directory, and the final pass over an extracted one.

/**
 * Copies a directory tree; symlinks must stay inside, anything but files/dirs/links refused.
 * @internal
 */
export async function copyTree(
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
 * @internal
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

/** fsyncs a file or directory. @internal */
export async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
