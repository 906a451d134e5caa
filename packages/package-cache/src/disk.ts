import { createHash } from 'node:crypto';
import { readdir, readFile, rm, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { isProcessAlive, type LockProvider, type Logger } from '@rigging/core';
import { finalizeTree } from './tree.js';
import { isSegment, metaPath, refKey, refPath, type PackageRef } from './ref.js';
import type { Entry } from './types.js';

// What the cache keeps on disk beside the packages: sidecars, temp dirs, progress files.

/** The directory of temp dirs, trash and progress files, under the root. @internal */
export const TMP = '.tmp';

/** A package's sidecar `{fqn}/{version}/.{id}.json`; its mtime is the last use. @internal */
export interface Meta {
  fqn: string;
  version: string;
  id: string;
  size: number;
  integrity: string | undefined;
  installedAt: number;
}

/** A download's progress file, read by waiters in other processes. @internal */
export interface ProgressFile {
  pid: number;
  host: string;
  received: number;
  total?: number | undefined;
  startedAt: number;
}

/** Where the downloader of `ref` reports its progress to waiters in other processes. @internal */
export function progressFilePath(root: string, ref: PackageRef): string {
  const h = createHash('sha256').update(refKey(ref)).digest('hex').slice(0, 32);
  return join(root, TMP, `progress-${h}.json`);
}

/** A progress file's content, or `undefined` when absent or unreadable. @internal */
export async function readProgress(path: string): Promise<ProgressFile | undefined> {
  try {
    const p = JSON.parse(await readFile(path, 'utf8')) as ProgressFile;
    return typeof p.pid === 'number' && typeof p.received === 'number' ? p : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A package's entry from its sidecar (or, without one, from its directory); `undefined` if absent.
 * @internal
 */
export async function readEntry(root: string, ref: PackageRef): Promise<Entry | undefined> {
  const dir = refPath(root, ref);
  const metaFile = metaPath(root, ref);
  try {
    const [raw, st] = await Promise.all([readFile(metaFile, 'utf8'), stat(metaFile)]);
    const meta = JSON.parse(raw) as Meta;
    return {
      ref,
      size: meta.size,
      integrity: meta.integrity,
      installedAt: meta.installedAt,
      lastUsed: st.mtimeMs,
      touchedAt: st.mtimeMs,
    };
  } catch {
    // A directory without its sidecar (edited by hand): size it, never trust it for integrity.
    try {
      const st = await stat(dir);
      if (!st.isDirectory()) return undefined;
      const size = await finalizeTree(dir, { durable: false, what: refKey(ref) }).catch(() => 0);
      return {
        ref,
        size,
        integrity: undefined,
        installedAt: st.mtimeMs,
        lastUsed: st.mtimeMs,
        touchedAt: 0,
      };
    } catch {
      return undefined;
    }
  }
}

/**
 * Removes temp dirs, trash and progress files left by processes that are gone, and sidecars whose
 * directory never got renamed into place. @internal
 */
export async function sweepLeftovers(
  root: string,
  locks: LockProvider,
  logger: Logger,
): Promise<void> {
  const dir = join(root, TMP);
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const path = join(dir, name);
    let pid: number | undefined;
    const m = /^(?:dl|trash)-(\d+)-/.exec(name);
    if (m) pid = Number(m[1]);
    else if (name.startsWith('progress-')) pid = (await readProgress(path))?.pid ?? 0;
    else continue;
    if (pid !== undefined && (pid === process.pid || isProcessAlive(pid))) continue;
    logger.info({ path }, 'package-cache: removing leftover of a dead process');
    await rm(path, { recursive: true, force: true });
  }
  // Sidecars whose directory never got renamed into place (crash between the two renames).
  for (const fqn of await dirNames(root)) {
    for (const version of await dirNames(join(root, fqn))) {
      const vdir = join(root, fqn, version);
      for (const name of await readdir(vdir).catch(() => [] as string[])) {
        const m = /^\.(.+)\.json$/.exec(name);
        if (!m || !isSegment(m[1]!)) continue;
        const ref = { fqn, version, id: m[1]! };
        const exists = await stat(refPath(root, ref)).then(
          () => true,
          () => false,
        );
        if (exists) continue;
        const lease = await locks.tryAcquire(`download:${refKey(ref)}`, {
          mode: 'exclusive',
        });
        if (!lease) continue;
        try {
          const still = await stat(refPath(root, ref)).then(
            () => true,
            () => false,
          );
          if (!still) await unlink(join(vdir, name)).catch(() => {});
        } finally {
          await lease.release();
        }
      }
    }
  }
}

/** Names of valid ref segments that are directories under `dir`. @internal */
export async function dirNames(dir: string): Promise<string[]> {
  try {
    const out: string[] = [];
    for (const d of await readdir(dir, { withFileTypes: true })) {
      if (d.isDirectory() && isSegment(d.name)) out.push(d.name);
    }
    return out;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/**
 * Removes a file if it is there: one system call, where `rm({ force: true })` makes three.
 * @internal
 */
export async function unlinkIfAny(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
