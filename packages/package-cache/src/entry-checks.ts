import { posix } from 'node:path';
import { PackageCacheError } from './errors.js';

// What makes an archive entry unsafe, whatever the format.

/** A `package-cache.unsafe_archive` error for `entry` (or the whole archive). @internal */
export function unsafe(what: string, problem: string, entry?: string): PackageCacheError {
  return new PackageCacheError(
    'package-cache.unsafe_archive',
    `refusing ${what}: ${entry === undefined ? '' : `entry ${JSON.stringify(entry)} `}${problem}`,
    { details: entry === undefined ? { problem } : { problem, entry } },
  );
}

/**
 * A `package-cache.corrupt_archive` error for `entry` (or, without one, the whole archive).
 * @internal
 */
export function corrupt(what: string, problem: string, entry?: string): PackageCacheError {
  const subject = entry === undefined ? 'the archive' : `entry ${JSON.stringify(entry)}`;
  return new PackageCacheError(
    'package-cache.corrupt_archive',
    `refusing ${what}: ${subject} is corrupt (${problem})`,
    { details: entry === undefined ? { problem } : { problem, entry } },
  );
}

/**
 * `message` with every mention of the directory `dir` (where an archive is extracted) removed, so
 * that paths in it read relative to the package. @internal
 */
export function withoutDir(message: string, dir: string): string {
  return message.split(`${dir}/`).join('').split(dir).join('.');
}

/** Whether `p` is absolute on POSIX or Windows (`/x`, `\\x`, `C:`). */
function isAbsolute(p: string): boolean {
  return p.startsWith('/') || p.startsWith('\\') || /^[A-Za-z]:/.test(p);
}

/**
 * Why a relative archive path is unsafe (absolute, escaping with `..`, NUL), or `undefined`.
 * @internal
 */
export function relativePathProblem(p: string): string | undefined {
  if (p === '') return 'has an empty name';
  if (p.includes('\0')) return 'contains NUL';
  if (isAbsolute(p)) return 'is absolute';
  // A backslash separates on Windows only: the name must stay inside read either way (`a\b/../..`
  // is two levels down on Windows, one on POSIX).
  if (escapes(p.split(/[\\/]+/)) || escapes(p.split('/'))) return 'escapes the package directory';
  return undefined;
}

/** Whether `parts`, followed from the package directory, ever climb above it. */
function escapes(parts: readonly string[]): boolean {
  let depth = 0;
  for (const part of parts) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (--depth < 0) return true;
    } else depth++;
  }
  return false;
}

/** Why a link entry is unsafe, or `undefined`. Symlinks resolve from their directory. @internal */
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
  if (isAbsolute(linkpath)) return `is a symlink to an absolute path (${linkpath})`;
  const resolved = posix.join(posix.dirname(entryPath.replace(/\\/g, '/')), linkpath);
  const p = relativePathProblem(resolved);
  return p ? `is a symlink pointing outside (${linkpath})` : undefined;
}
