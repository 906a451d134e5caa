import { chmod, mkdir, rm, utimes, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import { join, posix } from 'node:path';
import { throwIfAborted } from '@rigging/core';
import { ArchiveBudget, RATIO_FLOOR } from './limits.js';
import { relativePathProblem, unsafe } from './entry-checks.js';

// The fast path for a tar (or tar.gz) held in memory: checked whole, then written file by file.

/** Whether bytes start with the gzip magic. @internal */
export function isGzip(head: Uint8Array): boolean {
  return head[0] === 0x1f && head[1] === 0x8b;
}

const gunzipAsync = promisify(gunzip);
/**
 * Largest inflated archive the in-memory fast path accepts (larger ones stream through node-tar).
 */
const FAST_GUNZIP_LIMIT = 512 * 1024 * 1024;
const FAST_WRITERS = 8;

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
 * @internal
 */
export async function untarBuffer(
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
