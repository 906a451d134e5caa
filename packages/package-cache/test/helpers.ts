import { createHash } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import type { Lease, LockHolder, LockMode, LockProvider } from '@rigging/core';

/** A temp directory for one test. */
export function tempDir(prefix = 'pc-'): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
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

export interface ZipEntry {
  name: string;
  content?: string | Uint8Array;
  /** Unix mode including the file type (e.g. 0o120777 for a symlink, 0o020644 for a device). */
  mode?: number;
}

/** Builds a stored (uncompressed) zip with Unix modes. */
export function zipOf(entries: ZipEntry[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = Buffer.from(e.name, 'utf8');
    const body = e.content === undefined ? Buffer.alloc(0) : Buffer.from(e.content);
    const crc = crc32(body);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(0x800, 6);
    local.writeUInt16LE(0, 8);
    local.writeUInt32LE(crc >>> 0, 14);
    local.writeUInt32LE(body.length, 18);
    local.writeUInt32LE(body.length, 22);
    local.writeUInt16LE(name.length, 26);
    locals.push(local, name, body);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(0x800, 8);
    central.writeUInt32LE(crc >>> 0, 16);
    central.writeUInt32LE(body.length, 20);
    central.writeUInt32LE(body.length, 24);
    central.writeUInt16LE(name.length, 28);
    const mode = e.mode ?? (e.name.endsWith('/') ? 0o040755 : 0o100644);
    central.writeUInt32LE((mode << 16) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    centrals.push(central, name);
    offset += 30 + name.length + body.length;
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

/** A simple in-process shared/exclusive LockProvider for single-process tests. */
export function memoryLocks(): LockProvider {
  const state = new Map<string, { mode: LockMode; count: number; since: number }>();
  const waiters = new Map<string, (() => void)[]>();
  const grant = (key: string, mode: LockMode): Lease | undefined => {
    const s = state.get(key);
    if (s && (mode === 'exclusive' || s.mode === 'exclusive')) return undefined;
    if (s) s.count++;
    else state.set(key, { mode, count: 1, since: Date.now() });
    let released = false;
    return {
      key,
      mode,
      token: 1n,
      lost: new AbortController().signal,
      release: () => {
        if (released) return Promise.resolve();
        released = true;
        const cur = state.get(key)!;
        if (--cur.count === 0) state.delete(key);
        const ws = waiters.get(key) ?? [];
        waiters.delete(key);
        for (const w of ws) w();
        return Promise.resolve();
      },
      [Symbol.asyncDispose]() {
        return this.release();
      },
    };
  };
  return {
    tryAcquire: (key, o) => Promise.resolve(grant(key, o?.mode ?? 'exclusive')),
    async acquire(key, o) {
      for (;;) {
        o?.signal?.throwIfAborted();
        const lease = grant(key, o?.mode ?? 'exclusive');
        if (lease) return lease;
        await new Promise<void>((resolve, reject) => {
          const list = waiters.get(key) ?? [];
          list.push(resolve);
          waiters.set(key, list);
          o?.signal?.addEventListener('abort', () => reject(o.signal?.reason), { once: true });
        });
      }
    },
    holder: (key) => {
      const s = state.get(key);
      return Promise.resolve(
        s
          ? ({
              mode: s.mode,
              since: s.since,
              pid: process.pid,
              count: s.count,
            } satisfies LockHolder)
          : undefined,
      );
    },
  };
}
