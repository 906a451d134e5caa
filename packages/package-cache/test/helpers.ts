import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32, deflateRawSync } from 'node:zlib';
import { expect } from 'vitest';
import { RiggingError } from '@rigging/core';
import {
  PackageCache,
  type ArchiveLimits,
  type FetchedPackage,
  type PackageRef,
} from '../src/index.js';

/** A temp directory for one test. */
export function tempDir(prefix = 'pc-'): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

/** The package every refusal test acquires. */
const refusedRef: PackageRef = { fqn: 'io.example.Bomb', version: '1', id: 'a' };

/**
 * Acquires a package whose fetch hands over `fetched()` in a fresh cache and returns the error
 * it fails with, after checking that its message names no directory of this machine and that
 * nothing of the package stays: not the package, not its scratch directory, not a stray file.
 */
export async function refusal(
  fetched: () => FetchedPackage,
  limits?: ArchiveLimits,
): Promise<{ error: unknown; root: string; bytesLeft: number }> {
  const root = await tempDir('pc-limits-');
  const cache = await PackageCache.open({
    root,
    fetch: () => Promise.resolve(fetched()),
    durable: false,
    ...(limits ? { limits } : {}),
  });
  const error = await cache.acquire(refusedRef).then(
    () => undefined,
    (e: unknown) => e,
  );
  await cache.close();
  // Messages name entries relative to the package, never a directory of this machine.
  const message = String((error as Error | undefined)?.message);
  expect(message).not.toContain(root);
  expect(message).not.toContain(tmpdir());
  const left = (await readdir(join(root, '.tmp'))).filter((n) => !n.startsWith('progress-'));
  expect(left).toEqual([]);
  const { fqn, version, id } = refusedRef;
  expect(existsSync(join(root, fqn, version, id))).toBe(false);
  return { error, root, bytesLeft: await diskBytes(root) };
}

/** Asserts that `error` is a rigging error with `code`. */
export function expectCode(error: unknown, code: string): void {
  expect(RiggingError.hasCode(error, code as never), String(error)).toBe(true);
}

export function sri(bytes: Uint8Array, algorithm: 'sha256' | 'sha512' = 'sha512'): string {
  return `${algorithm}-${createHash(algorithm).update(bytes).digest('base64')}`;
}

export interface TarEntry {
  name: string;
  /** '0' file, '1' hard link, '2' symlink, '3' char device, '5' directory, '6' FIFO. */
  type?: '0' | '1' | '2' | '3' | '4' | '5' | '6';
  content?: string | Uint8Array;
  linkname?: string;
  mode?: number;
}

/** Builds a raw ustar archive (no sanitising, so tests can craft malicious entries). */
export function tarOf(entries: TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = e.content === undefined ? Buffer.alloc(0) : Buffer.from(e.content);
    const h = Buffer.alloc(512);
    h.write(e.name, 0, 100, 'utf8');
    h.write((e.mode ?? (e.type === '5' ? 0o755 : 0o644)).toString(8).padStart(7, '0'), 100);
    h.write('0000000', 108);
    h.write('0000000', 116);
    h.write(body.length.toString(8).padStart(11, '0'), 124);
    h.write('00000000000', 136);
    h.write('        ', 148);
    h.write(e.type ?? '0', 156);
    if (e.linkname) h.write(e.linkname, 157, 100, 'utf8');
    h.write('ustar\0', 257);
    h.write('00', 263);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
    blocks.push(h, body);
    const pad = (512 - (body.length % 512)) % 512;
    if (pad) blocks.push(Buffer.alloc(pad));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** A ustar header for a regular file `name` announcing `size` bytes (the body is up to the caller). */
export function tarHeader(name: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, 'utf8');
  h.write('0000644', 100);
  h.write('0000000', 108);
  h.write('0000000', 116);
  h.write(size.toString(8).padStart(11, '0'), 124);
  h.write('00000000000', 136);
  h.write('        ', 148);
  h.write('0', 156);
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return h;
}

/** A tar of `count` empty files (`f0`, `f1`, …), built quickly for entry-count tests. */
export function tarOfEmptyFiles(count: number): Buffer {
  const blocks: Buffer[] = [];
  for (let i = 0; i < count; i++) blocks.push(tarHeader(`f${i}`, 0));
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** Total bytes of the regular files under `dir`, lock files aside (0 when it does not exist). */
export async function diskBytes(dir: string): Promise<number> {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
  for (const d of entries) {
    if (d.isFile() && !d.parentPath.startsWith(join(dir, '.locks'))) {
      total += (await lstat(join(d.parentPath, d.name))).size;
    }
  }
  return total;
}

export interface ZipEntry {
  name: string;
  content?: string | Uint8Array;
  /** Unix mode including the file type (e.g. 0o120777 for a symlink, 0o020644 for a device). */
  mode?: number;
  /** Store the body deflated (method 8) rather than as is. */
  deflate?: boolean;
  /** Header fields written instead of the true ones, to build zips that lie. */
  lie?: ZipLie;
}

/** What a lying zip header says (each field replaces the true value in one header). */
export interface ZipLie {
  /** CRC-32 in both headers. */
  crc?: number;
  /** CRC-32 in the local header only. */
  localCrc?: number;
  localCompressed?: number;
  localUncompressed?: number;
  centralCompressed?: number;
  centralUncompressed?: number;
  /** The file name in the local header (the central directory keeps `name`). */
  localName?: string;
}

/** Builds a zip with Unix modes, entries stored as is unless `deflate`. */
export function zipOf(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name, 'utf8');
    const lie = e.lie ?? {};
    const localName = lie.localName === undefined ? name : Buffer.from(lie.localName, 'utf8');
    const raw = e.content === undefined ? Buffer.alloc(0) : Buffer.from(e.content);
    const crc = lie.crc ?? crc32(raw);
    const body = e.deflate ? deflateRawSync(raw) : raw;
    const method = e.deflate ? 8 : 0;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x800, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt32LE((lie.localCrc ?? crc) >>> 0, 14);
    local.writeUInt32LE(lie.localCompressed ?? body.length, 18);
    local.writeUInt32LE(lie.localUncompressed ?? raw.length, 22);
    local.writeUInt16LE(localName.length, 26);
    locals.push(local, localName, body);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0x800, 8);
    central.writeUInt16LE(method, 10);
    central.writeUInt32LE(crc >>> 0, 16);
    central.writeUInt32LE(lie.centralCompressed ?? body.length, 20);
    central.writeUInt32LE(lie.centralUncompressed ?? raw.length, 24);
    central.writeUInt16LE(name.length, 28);
    const mode = e.mode ?? (e.name.endsWith('/') ? 0o040755 : 0o100644);
    central.writeUInt32LE((mode << 16) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    centrals.push(central, name);
    offset += 30 + localName.length + body.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}
