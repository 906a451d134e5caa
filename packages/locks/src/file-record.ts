// The lock file's content: fencing counter and holder record, read and written in place.
import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  ftruncateSync,
  openSync,
  readSync,
  writeSync,
} from 'node:fs';
import { hostname } from 'node:os';
import { isProcessAlive } from '@rigging/core';
import type { LockHolder, LockMode } from '@rigging/core';
import { fsx } from './file-native.js';
import type { TokenSource } from './file-tokens.js';

const HOST = hostname();
const HOST_JSON = JSON.stringify(HOST);
/** @internal The byte whose lock is the lock itself (shared or exclusive). */
export const LOCK_OFFSET = 0;
/** @internal The byte shared holders lock briefly, exclusively, while updating the record. */
export const META_OFFSET = 1;
const READ_SIZE = 65536;
/**
 * Every write to a lock file sets its size to `SIZE_BASE + (n mod SIZE_SPAN)` for the n-th write
 * (the record itself stays below `SIZE_BASE`; the rest is a hole), so a size the same as at our own
 * last write, with the same mtime and ctime, proves nobody wrote since (see `FileLock#tryOnce`).
 */
const SIZE_BASE = READ_SIZE;
const SIZE_SPAN = 1 << 20;
/** Tokens an exclusive grant reserves in the file; later grants of the same descriptor use them up without writing. */
const RESERVE = 1024;

/**
 * What this process knows about a lock file since its own last write: the file's identity and
 * (size, mtime, ctime) right after that write, and the tokens it reserved there (`next`..`hi`).
 * @internal
 */
export interface TokenCache {
  ino: number;
  dev: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  next: number;
  hi: number;
}

interface HolderRecord {
  pid: number;
  host: string;
  since: number;
  /** Shared holders only (exclusive records: the counter is the holder's token). */
  token?: string;
}

interface FileRecord {
  v: 1;
  mode: LockMode;
  holders: HolderRecord[];
}

/** @internal True when the file is the one of the cache, and nobody wrote it since our own last write. */
export function unchangedSince(
  c: TokenCache,
  st: { ino: number; dev: number; size: number; mtimeMs: number; ctimeMs: number },
): boolean {
  return (
    st.size === c.size &&
    st.mtimeMs === c.mtimeMs &&
    st.ctimeMs === c.ctimeMs &&
    st.ino === c.ino &&
    st.dev === c.dev
  );
}

/**
 * The size a write sets when the file had `size`: the next step of the write count (see
 * SIZE_BASE). A size below SIZE_BASE (a new file) starts the count; one beyond the span (set by
 * hand) is brought back into it; either way the size changes.
 */
function nextSize(size: number): number {
  const n = size >= SIZE_BASE ? size - SIZE_BASE + 1 : 0;
  return SIZE_BASE + (n % SIZE_SPAN);
}

/** Ends a write: moves the size one step (see SIZE_BASE) from `sizeBefore`. */
function bumpSize(fd: number, sizeBefore: number): void {
  ftruncateSync(fd, nextSize(sizeBefore));
}

// Scratch buffers (`readBuf`, `tokenBuf`, `exRecord`, `sinceBuf`, `writeBuf`): each function below
// fills what it reads back and none keeps one across an `await`, so every FileLock of the process
// shares them without sharing state (no allocation per grant).
const readBuf = Buffer.allocUnsafe(READ_SIZE);

/** Record layout: `<token, 20 digits>\n<JSON record>\n`, then a hole up to the size (see SIZE_BASE). */
function readRecord(fd: number): { token: bigint; record: FileRecord | undefined } {
  // most records are short: read a page first, the rest only when the record does not end there
  let n = readSync(fd, readBuf, 0, 4096, 0);
  let end = readBuf.subarray(0, n).indexOf(10, 21); // -1 as well when n <= 21
  if (end < 0 && n === 4096) {
    n = readSync(fd, readBuf, 0, READ_SIZE, 0);
    end = readBuf.subarray(0, n).indexOf(10, 21);
  }
  if (n < 21) return { token: 0n, record: undefined };
  const token = BigInt(counterIn(readBuf));
  let record: FileRecord | undefined;
  if (end > 21) {
    try {
      const parsed = JSON.parse(readBuf.toString('utf8', 21, end)) as FileRecord;
      if (parsed && parsed.v === 1 && Array.isArray(parsed.holders)) record = parsed;
    } catch {
      // not a record this version can read: none
    }
  }
  return { token, record };
}

/**
 * Who holds the lock of `path`, from the record its holders wrote (`undefined`: no record). A
 * `since` not written yet (a young exclusive lease) reads as `now`. Diagnostic only: never throws.
 * @internal
 */
export function readHolder(path: string, now: number, fdIn?: number): LockHolder | undefined {
  let fd = fdIn;
  try {
    fd ??= openSync(path, fsConstants.O_RDONLY);
    const { record } = readRecord(fd);
    const first = record?.holders[0];
    if (!record || !first) return undefined;
    let since = first.since;
    for (const h of record.holders) since = Math.min(since, h.since);
    // an exclusive lease younger than RECORD_SINCE_AFTER_MS has not written it yet
    if (!(since > 0)) since = now;
    return {
      mode: record.mode,
      since,
      pid: first.pid,
      host: first.host,
      ...(record.mode === 'shared' ? { count: record.holders.length } : {}),
    };
  } catch {
    return undefined;
  } finally {
    if (fdIn === undefined && fd !== undefined) closeSync(fd);
  }
}

const tokenBuf = Buffer.alloc(20);

/**
 * The exclusive holder's record never changes within a process except for the counter and
 * `since`, so it is a template written in one `pwrite`:
 * `<counter, 20 digits>\n{"v":1,"mode":"exclusive","holders":[{"pid":…,"host":…,"since":<13 chars>}]}\n`
 * (`since` right-aligned, `0` until the lease has been held RECORD_SINCE_AFTER_MS).
 */
const EX_HEAD = Buffer.from(
  `\n{"v":1,"mode":"exclusive","holders":[{"pid":${process.pid},"host":${HOST_JSON},"since":`,
);
const EX_SINCE_AT = 20 + EX_HEAD.length;
const exRecord = Buffer.alloc(EX_SINCE_AT + 13 + 4);
EX_HEAD.copy(exRecord, 20);
exRecord.write('}]}\n', EX_SINCE_AT + 13, 'latin1');
const sinceBuf = Buffer.alloc(13);

/**
 * An exclusive grant whose token cache is not valid (another descriptor or process wrote since,
 * or the reserved tokens are used up): advances the counter in the file by RESERVE tokens, writes
 * our holder record, moves the size one step and remembers the file's state after the write, so
 * the next grants of this key can take the reserved tokens without reading or writing.
 * @internal
 */
export function reserveExclusive(
  state: { cache: TokenCache | undefined },
  tokens: TokenSource,
  fd: number,
  sizeBefore: number,
  now: number,
): bigint {
  state.cache = undefined;
  const previous = readCounter(fd);
  // numbers while the reserved block stays within the safe integers (until the 23rd century);
  // bigints beyond. `hi` is the largest of them: when it is safe, so are the clock floor and `after`.
  if (typeof previous === 'number') {
    const floor = Math.floor(now) * 1000;
    const after = Number(tokens.floor); // this FileLock's grants, any key (a replaced file)
    const first = Math.max(previous >= floor ? previous + 1 : floor, after);
    const hi = first + RESERVE - 1;
    if (Number.isSafeInteger(hi)) {
      writeDigits(exRecord, 0, 20, hi);
      writeSince(exRecord, EX_SINCE_AT, 0);
      writeAll(fd, exRecord, exRecord.length, 0);
      bumpSize(fd, sizeBefore);
      const st = fstatSync(fd);
      state.cache = {
        ino: st.ino,
        dev: st.dev,
        size: st.size,
        mtimeMs: st.mtimeMs,
        ctimeMs: st.ctimeMs,
        next: first + 1,
        hi,
      };
      return tokens.issued(BigInt(first));
    }
  }
  const next = tokens.next(BigInt(previous), now);
  const t = next.toString();
  writeText(
    fd,
    `${t.padStart(20, '0')}\n{"v":1,"mode":"exclusive","holders":[{"pid":${process.pid},"host":${HOST_JSON},"since":0}]}\n`,
  );
  bumpSize(fd, sizeBefore);
  return next;
}

/**
 * Writes `since` (0: not recorded) into the exclusive record of a file we hold exclusively; keeps
 * the token cache valid when it was (we are the only writer while we hold the lock).
 * @internal
 */
export function writeExclusiveSince(
  state: { cache: TokenCache | undefined },
  fd: number,
  since: number,
): void {
  const st = fstatSync(fd);
  const c = state.cache;
  const cacheValid = c !== undefined && unchangedSince(c, st);
  writeSince(sinceBuf, 0, since);
  writeAll(fd, sinceBuf, 13, EX_SINCE_AT);
  bumpSize(fd, st.size);
  if (cacheValid) {
    const after = fstatSync(fd);
    c.size = after.size;
    c.mtimeMs = after.mtimeMs;
    c.ctimeMs = after.ctimeMs;
  } else state.cache = undefined;
}

/** @internal Shared grant: advances the counter and appends us to the holders, under the metadata lock. */
export function grantShared(fd: number, tokens: TokenSource, now: number): bigint | undefined {
  if (!fsx.tryLock(fd, META_OFFSET, 1, { shared: false })) return undefined;
  try {
    // other shared holders write under the metadata lock too: the size is read under it
    const sizeBefore = fstatSync(fd).size;
    const { token, record } = readRecord(fd);
    const next = tokens.next(token, now);
    const holders =
      record?.mode === 'shared'
        ? record.holders.filter((h) => h.host !== HOST || isProcessAlive(h.pid))
        : [];
    holders.push({ pid: process.pid, host: HOST, since: now, token: next.toString() });
    writeRecord(fd, next, { v: 1, mode: 'shared', holders });
    bumpSize(fd, sizeBefore);
    return next;
  } finally {
    fsx.unlock(fd, META_OFFSET, 1);
  }
}

/** @internal Removes this shared holder from the record; false when the metadata lock is busy. */
export function unrecordShared(fd: number, token: bigint): boolean {
  if (!fsx.tryLock(fd, META_OFFSET, 1, { shared: false })) return false;
  try {
    const { token: counter, record } = readRecord(fd);
    if (record?.mode === 'shared') {
      const t = token.toString();
      record.holders = record.holders.filter((h) => !(h.pid === process.pid && h.token === t));
      const sizeBefore = fstatSync(fd).size;
      writeRecord(fd, counter, record);
      bumpSize(fd, sizeBefore);
    }
    return true;
  } finally {
    fsx.unlock(fd, META_OFFSET, 1);
  }
}

/** The counter (first 20 bytes; 0 when missing or malformed), a number while it is safe. */
function readCounter(fd: number): number | bigint {
  const n = readSync(fd, tokenBuf, 0, 20, 0);
  return n < 20 ? 0 : counterIn(tokenBuf);
}

/**
 * The counter in the first 20 bytes of `buf`: FileLock writes 20 digits; one padded with spaces
 * by hand is read too, by every grant; anything else is damaged and counts as 0. A number while
 * it is a safe integer, else a bigint.
 */
function counterIn(buf: Buffer): number | bigint {
  const digits = buf.toString('latin1', 0, 20).trim();
  if (!/^\d+$/.test(digits)) return 0;
  const value = Number(digits);
  return Number.isSafeInteger(value) ? value : BigInt(digits);
}

function writeDigits(buf: Buffer, offset: number, width: number, value: number): void {
  for (let i = offset + width - 1; i >= offset; i--) {
    buf[i] = 48 + (value % 10);
    value = Math.floor(value / 10);
  }
}

/** `value` right-aligned in 13 chars, spaces before it (valid JSON whitespace). */
function writeSince(buf: Buffer, offset: number, value: number): void {
  let i = offset + 12;
  do {
    buf[i--] = 48 + (value % 10);
    value = Math.floor(value / 10);
  } while (value > 0 && i >= offset);
  while (i >= offset) buf[i--] = 32;
}

function writeAll(fd: number, buf: Buffer, len: number, position: number): void {
  let off = 0;
  while (off < len) off += writeSync(fd, buf, off, len - off, position + off);
}

function writeRecord(fd: number, token: bigint, record: FileRecord): void {
  let text = JSON.stringify(record);
  // the record stays below SIZE_BASE: a very long list of shared holders keeps its first (oldest)
  // holder, whose `since` holder() reports, and the newest ones
  while (text.length * 3 > SIZE_BASE - 64 && record.holders.length > 1) {
    record.holders.splice(1, Math.ceil(record.holders.length / 4));
    text = JSON.stringify(record);
  }
  writeText(fd, `${token.toString().padStart(20, '0')}\n${text}\n`);
}

const writeBuf = Buffer.alloc(READ_SIZE);

function writeText(fd: number, text: string): void {
  // records fit the shared buffer (no allocation per grant)
  writeAll(fd, writeBuf, writeBuf.write(text, 0, 'utf8'), 0);
}
