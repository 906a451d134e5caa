// Minimal tar writer for the upload tests: enough ustar to build hostile archives by hand.
import { gzipSync } from 'node:zlib';

export interface TarEntry {
  name: string;
  /** File contents; links and directories have none. */
  body?: Uint8Array | string;
  type?: 'file' | 'dir' | 'symlink';
  /** Link target (symlinks). */
  link?: string;
}

function header(entry: TarEntry, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(entry.name, 0, 100, 'utf8');
  h.write(entry.type === 'dir' ? '0000755\0' : '0000644\0', 100, 'ascii');
  h.write('0000000\0', 108, 'ascii');
  h.write('0000000\0', 116, 'ascii');
  h.write(`${size.toString(8).padStart(11, '0')}\0`, 124, 'ascii');
  h.write('00000000000\0', 136, 'ascii');
  h.write('        ', 148, 'ascii');
  h.write(entry.type === 'dir' ? '5' : entry.type === 'symlink' ? '2' : '0', 156, 'ascii');
  if (entry.link) h.write(entry.link, 157, 100, 'utf8');
  h.write('ustar\0', 257, 'ascii');
  h.write('00', 263, 'ascii');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'ascii');
  return h;
}

/** A tar archive of `entries`. */
export function tar(entries: Iterable<TarEntry>): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const body = e.body === undefined ? Buffer.alloc(0) : Buffer.from(e.body);
    parts.push(header(e, body.length), body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

/** A gzipped tar archive of `entries`. */
export function tgz(entries: Iterable<TarEntry>): Buffer {
  return gzipSync(tar(entries), { level: 9 });
}
