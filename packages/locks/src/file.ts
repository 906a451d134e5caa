import { createHash } from 'node:crypto';
import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { AcquireOptions, Lease, LockHolder, LockMode, LockProvider } from '@rigging/core';
import {
  LeaseImpl,
  abortedError,
  describe,
  emitAcquired,
  newEmitter,
  validateKey,
  validateRequest,
  type LockEmitter,
  type ProviderBaseOptions,
} from './common.js';
import { WaitQueue } from './queue.js';
import { waitInQueue, type Grant } from './wait.js';

interface FsNative {
  tryLock(fd: number, offset: number, length: number, opts: { shared?: boolean }): boolean;
  unlock(fd: number, offset?: number, length?: number): void;
}

const require = createRequire(import.meta.url);
const fsx = require('fs-native-extensions') as FsNative;

const HOST = hostname();
const HOST_JSON = JSON.stringify(HOST);
const LOCK_OFFSET = 0; // byte 0: the lock itself (shared or exclusive)
const META_OFFSET = 1; // byte 1: brief exclusive lock among shared holders updating the record
const READ_SIZE = 65536;
/**
 * Every write to a lock file sets its size to `SIZE_BASE + (n mod SIZE_SPAN)` for the n-th write
 * (the record itself stays below `SIZE_BASE`; the rest is a hole), so a size the same as at our own
 * last write, with the same mtime and ctime, proves nobody wrote since (see `#tryOnce`).
 */
const SIZE_BASE = READ_SIZE;
const SIZE_SPAN = 1 << 20;
/** Tokens an exclusive grant reserves in the file; later grants of the same descriptor use them up without writing. */
const RESERVE = 1024;
/** An exclusive lease held this long gets its `since` written for `holder()`. */
const RECORD_SINCE_AFTER_MS = 50;
const SHARED = { shared: true };
const STAT_OPTIONS = { throwIfNoEntry: false } as const;
const EXCLUSIVE = { shared: false };

// Methods TwoLevelLock calls on its file level, keyed by symbols the package does not export.
/** Throws the `TypeError` for a key that cannot name a lock file. */
export const checkKeyOf: unique symbol = Symbol('checkKey');
/** One synchronous non-blocking attempt. */
export const tryNow: unique symbol = Symbol('tryNow');

/** Options of {@link FileLock}. */
export interface FileLockOptions extends ProviderBaseOptions {
  /** Directory holding one `<encoded key>.lock` file per key (created when missing). */
  dir: string;
  /** First retry delay while another process holds the lock. @default 1 */
  pollMinMs?: number;
  /** Longest retry delay (the backoff doubles up to this; bounds the handover after a crash). @default 16 */
  pollMaxMs?: number;
  /** How often held leases check that their lock file is still in place (0: only at release). @default 1000 */
  checkIntervalMs?: number;
  /** Idle lock-file descriptors kept open for reuse (keys released recently). @default 64 */
  maxIdleFds?: number;
  /** Name used in events. @default 'file' */
  name?: string;
}

interface Held {
  fd: number;
  ino: number;
  dev: number;
  token: bigint;
}

interface FileWaiter {
  mode: LockMode;
  g: Grant<Held>;
}

/**
 * What this process knows about a lock file since its own last write: the file's identity and
 * (size, mtime, ctime) right after that write, and the tokens it reserved there (`next`..`hi`).
 */
interface TokenCache {
  ino: number;
  dev: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  next: number;
  hi: number;
}

interface KeyState {
  key: string;
  path: string;
  cache: TokenCache | undefined;
  queue: WaitQueue<FileWaiter>;
  polling: boolean;
  wake: (() => void) | undefined;
  leases: Set<FileLease>;
  idleFd: number | undefined;
  idleIno: number;
  idleDev: number;
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

class FileLease extends LeaseImpl {
  held!: Held;
  state!: KeyState;
  /** Exclusive leases: `since` written into the record (held longer than RECORD_SINCE_AFTER_MS). */
  sinceWritten = false;
}

/**
 * Encodes a key into a file name: `[A-Za-z0-9_-]` kept, everything else `%XX` (UTF-8), so no
 * key can contain a path separator or be `.`/`..`; long keys are shortened with a SHA-256 suffix.
 */
export function encodeLockKey(key: string): string {
  validateKey(key);
  let encoded: string;
  try {
    encoded = encodeURIComponent(key).replace(
      /[.!~*'()]/g,
      (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase(),
    );
  } catch {
    throw new TypeError(`lock key must be well-formed Unicode, got ${describe(key)}`);
  }
  if (encoded.length > 180) {
    encoded = `${encoded.slice(0, 120)}~${createHash('sha256').update(key).digest('hex').slice(0, 40)}`;
  }
  return encoded;
}

function isErrno(error: unknown, code: string): boolean {
  return (error as { code?: unknown } | null)?.code === code;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return !isErrno(error, 'ESRCH');
  }
}

/**
 * Cross-process shared/exclusive locks, one file per key in a directory, through Linux
 * open-file-description locks (fs-native-extensions). The kernel releases a lock when its holder
 * dies. Waits never block a libuv thread: one poller per key per process retries non-blocking
 * with bounded exponential backoff while the other waiters of this process queue behind it (FIFO).
 *
 * Each lock file holds the fencing counter and who holds the lock (pid, host, since), written by
 * the holder; files are never deleted. Tokens: every grant (shared or exclusive) advances the
 * counter kept in the file (under the exclusive lock, or under a brief metadata lock among shared
 * holders), and never goes below `Date.now() * 1000`, so tokens keep increasing even if a lock
 * file is deleted by hand.
 */
export class FileLock implements LockProvider {
  readonly dir: string;
  readonly events: LockEmitter;
  readonly name: string;
  #pollMin: number;
  #pollMax: number;
  #checkInterval: number;
  #maxIdleFds: number;
  #states = new Map<string, KeyState>();
  #idle = new Set<KeyState>();
  #dirReady = false;
  #checker: ReturnType<typeof setInterval> | undefined;
  #sinceTimer: ReturnType<typeof setTimeout> | undefined;
  #heldCount = 0;
  #onRelease = (lease: LeaseImpl) => this.#release(lease as FileLease);

  constructor(options: FileLockOptions | string) {
    const opts: FileLockOptions = typeof options === 'string' ? { dir: options } : options;
    if (typeof opts?.dir !== 'string' || opts.dir.length === 0) {
      throw new TypeError(`FileLock: dir must be a non-empty string, got ${describe(opts?.dir)}`);
    }
    this.dir = resolve(opts.dir);
    this.events = opts.events ?? newEmitter();
    this.name = opts.name ?? 'file';
    this.#pollMin = positive('pollMinMs', opts.pollMinMs, 1);
    this.#pollMax = Math.max(this.#pollMin, positive('pollMaxMs', opts.pollMaxMs, 16));
    this.#checkInterval = nonNegative('checkIntervalMs', opts.checkIntervalMs, 1000);
    this.#maxIdleFds = nonNegative('maxIdleFds', opts.maxIdleFds, 64);
  }

  /** The lock file of `key`. */
  pathOf(key: string): string {
    return join(this.dir, `${encodeLockKey(key)}.lock`);
  }

  acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    let state: KeyState | undefined;
    try {
      const { mode, timeoutMs } = validateRequest('FileLock', key, options);
      if (options.signal?.aborted) throw abortedError(key, options.signal.reason);
      state = this.#state(key);
      const started = Date.now();
      if (state.queue.size === 0) {
        // the uncontended path: synchronous, no promise chain
        const held = this.#tryOnce(state, mode);
        if (held) return Promise.resolve(this.#lease(state, mode, held, started));
      }
      return this.#wait(state, mode, { timeoutMs, signal: options.signal }, started);
    } catch (error) {
      if (state) this.#maybeForget(state);
      return Promise.reject(error);
    }
  }

  async #wait(
    state: KeyState,
    mode: LockMode,
    options: AcquireOptions,
    started: number,
  ): Promise<Lease> {
    const { key, path } = state;
    if (this.events.hasListeners('lock:waiting')) {
      this.events.emit('lock:waiting', {
        provider: this.name,
        key,
        mode,
        holder: this.#readHolder(path),
        since: started,
      });
    }
    try {
      const held = await waitInQueue<Held>(
        {
          key,
          timeoutMs: options.timeoutMs,
          signal: options.signal,
          holder: () => this.#readHolder(path),
        },
        (g) => {
          const node = state.queue.push({ mode, g });
          if (!state.polling) void this.#poll(state);
          return () => {
            state.queue.remove(node);
            state.wake?.();
          };
        },
      );
      return this.#lease(state, mode, held, started);
    } finally {
      this.#maybeForget(state);
    }
  }

  tryAcquire(key: string, options: { mode?: LockMode } = {}): Promise<Lease | undefined> {
    let mode: LockMode;
    try {
      ({ mode } = validateRequest('FileLock', key, options));
    } catch (error) {
      return Promise.reject(error);
    }
    const state = this.#state(key);
    if (state.queue.size > 0) return Promise.resolve(undefined);
    let held: Held | undefined;
    try {
      held = this.#tryOnce(state, mode);
    } catch (error) {
      this.#maybeForget(state);
      return Promise.reject(error);
    }
    if (!held) {
      this.#maybeForget(state);
      return Promise.resolve(undefined);
    }
    return Promise.resolve(this.#lease(state, mode, held, Date.now()));
  }

  /** Throws the `TypeError` for a key that cannot name a lock file (keys with a state were checked). */
  [checkKeyOf](key: string): void {
    if (!this.#states.has(key)) encodeLockKey(key);
  }

  /**
   * One synchronous non-blocking attempt (for TwoLevelLock's front waiter): a lease, or
   * `undefined` when the lock is taken or waiters of this process queue for it.
   */
  [tryNow](key: string, mode: LockMode, started: number): Lease | undefined {
    const state = this.#state(key);
    if (state.queue.size > 0) return undefined;
    let held: Held | undefined;
    try {
      held = this.#tryOnce(state, mode);
    } finally {
      if (!held) this.#maybeForget(state);
    }
    return held && this.#lease(state, mode, held, started);
  }

  /**
   * Who holds `key`: probes the lock (a non-blocking exclusive try on a separate descriptor) and
   * reads the record the holder wrote. `undefined` when free. Diagnostic only: the answer may be
   * stale by the time it is read, and the probe can make a concurrent `tryAcquire` fail.
   */
  holder(key: string): Promise<LockHolder | undefined> {
    const path = this.pathOf(key);
    let fd: number;
    try {
      fd = openSync(path, fsConstants.O_RDWR);
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return Promise.resolve(undefined);
      return Promise.reject(error);
    }
    try {
      if (fsx.tryLock(fd, LOCK_OFFSET, 1, { shared: false })) {
        fsx.unlock(fd, LOCK_OFFSET, 1);
        return Promise.resolve(undefined);
      }
      return Promise.resolve(this.#readHolder(path, fd) ?? { mode: 'exclusive', since: 0 });
    } finally {
      closeSync(fd);
    }
  }

  /** Closes cached descriptors and stops the lost-lease checker (held leases stay held). */
  close(): void {
    for (const state of [...this.#idle]) this.#closeIdle(state);
    if (this.#checker) clearInterval(this.#checker);
    this.#checker = undefined;
    if (this.#sinceTimer) clearTimeout(this.#sinceTimer);
    this.#sinceTimer = undefined;
  }

  // ------------------------------------------------------------------------------------------

  #state(key: string): KeyState {
    let state = this.#states.get(key);
    if (!state) {
      state = {
        key,
        path: this.pathOf(key),
        queue: new WaitQueue(),
        polling: false,
        wake: undefined,
        cache: undefined,
        leases: new Set(),
        idleFd: undefined,
        idleIno: 0,
        idleDev: 0,
      };
      this.#states.set(key, state);
    }
    return state;
  }

  #maybeForget(state: KeyState): void {
    if (state.queue.size > 0 || state.polling || state.leases.size > 0) return;
    if (state.idleFd !== undefined && this.#maxIdleFds > 0) {
      // keep the descriptor for reuse, evicting the oldest idle key beyond the cap
      this.#idle.delete(state);
      this.#idle.add(state);
      while (this.#idle.size > this.#maxIdleFds) {
        const oldest = this.#idle.values().next().value as KeyState;
        this.#closeIdle(oldest);
      }
      return;
    }
    this.#closeIdle(state);
  }

  #closeIdle(state: KeyState): void {
    this.#idle.delete(state);
    if (state.idleFd !== undefined) {
      closeSync(state.idleFd);
      state.idleFd = undefined;
    }
    if (state.queue.size === 0 && !state.polling && state.leases.size === 0) {
      if (this.#states.get(state.key) === state) this.#states.delete(state.key);
    }
  }

  #openFile(state: KeyState): number {
    if (!this.#dirReady) {
      mkdirSync(this.dir, { recursive: true });
      this.#dirReady = true;
    }
    try {
      return openSync(state.path, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o644);
    } catch (error) {
      if (!isErrno(error, 'ENOENT')) throw error;
      mkdirSync(this.dir, { recursive: true });
      return openSync(state.path, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o644);
    }
  }

  #putBack(state: KeyState, fd: number, ino: number, dev: number): void {
    if (state.idleFd === undefined) {
      state.idleFd = fd;
      state.idleIno = ino;
      state.idleDev = dev;
    } else closeSync(fd);
  }

  /** One non-blocking attempt; the lock, the inode check and the record update are synchronous. */
  #tryOnce(state: KeyState, mode: LockMode): Held | undefined {
    for (let attempt = 0; attempt < 5; attempt++) {
      // a descriptor kept from an earlier grant of this key, or a fresh one
      let fd: number;
      let ino: number;
      let dev: number;
      if (state.idleFd !== undefined) {
        fd = state.idleFd;
        ino = state.idleIno;
        dev = state.idleDev;
        state.idleFd = undefined;
        this.#idle.delete(state);
      } else {
        fd = this.#openFile(state);
        try {
          const st = fstatSync(fd);
          ino = st.ino;
          dev = st.dev;
        } catch (error) {
          closeSync(fd);
          throw error;
        }
      }
      let locked = false;
      try {
        if (!fsx.tryLock(fd, LOCK_OFFSET, 1, mode === 'shared' ? SHARED : EXCLUSIVE)) {
          this.#putBack(state, fd, ino, dev);
          return undefined;
        }
        locked = true;
        // the path must still name the file we locked (one stat; ENOENT gives undefined)
        const st = statSync(state.path, STAT_OPTIONS);
        if (st === undefined || st.ino !== ino || st.dev !== dev) {
          // the file was removed or replaced after we opened it: this lock guards nothing
          fsx.unlock(fd, LOCK_OFFSET, 1);
          locked = false;
          closeSync(fd);
          continue;
        }
        let token: bigint | undefined;
        if (mode === 'exclusive') {
          const c = state.cache;
          if (c !== undefined && c.next <= c.hi && unchangedSince(c, st)) {
            // nobody wrote the file since our last write: the counter there is still our `hi`
            token = BigInt(c.next++);
          } else token = reserveExclusive(state, fd, st.size);
        } else {
          state.cache = undefined;
          token = grantShared(fd);
        }
        if (token === undefined) {
          // another shared holder is updating the record right now: treat as busy, retry soon
          fsx.unlock(fd, LOCK_OFFSET, 1);
          locked = false;
          this.#putBack(state, fd, ino, dev);
          return undefined;
        }
        return { fd, ino, dev, token };
      } catch (error) {
        if (locked) fsx.unlock(fd, LOCK_OFFSET, 1);
        closeSync(fd);
        throw error;
      }
    }
    throw new Error(`lock file ${state.path} keeps being replaced; giving up`);
  }

  #readHolder(path: string, fdIn?: number): LockHolder | undefined {
    let fd = fdIn;
    try {
      fd ??= openSync(path, fsConstants.O_RDONLY);
      const { record } = readRecord(fd);
      const first = record?.holders[0];
      if (!record || !first) return undefined;
      let since = first.since;
      for (const h of record.holders) since = Math.min(since, h.since);
      // an exclusive lease younger than RECORD_SINCE_AFTER_MS has not written it yet
      if (!(since > 0)) since = Date.now();
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

  async #poll(state: KeyState): Promise<void> {
    state.polling = true;
    let delay = this.#pollMin;
    try {
      for (let node = state.queue.head; node; node = state.queue.head) {
        let held: Held | undefined;
        try {
          held = this.#tryOnce(state, node.value.mode);
        } catch (error) {
          state.queue.remove(node);
          node.value.g.fail(error);
          continue;
        }
        if (held) {
          state.queue.remove(node);
          node.value.g.grant(held);
          delay = this.#pollMin;
          continue;
        }
        await new Promise<void>((resolveSleep) => {
          const timer = setTimeout(done, delay * (0.75 + Math.random() * 0.5));
          function done() {
            clearTimeout(timer);
            state.wake = undefined;
            resolveSleep();
          }
          state.wake = done;
        });
        delay = Math.min(delay * 2, this.#pollMax);
      }
    } finally {
      state.polling = false;
      this.#maybeForget(state);
    }
  }

  #lease(state: KeyState, mode: LockMode, held: Held, started: number): Lease {
    const lease = new FileLease({
      key: state.key,
      mode,
      token: held.token,
      provider: this.name,
      events: this.events,
      onRelease: this.#onRelease,
    });
    lease.held = held;
    lease.state = state;
    state.leases.add(lease);
    this.#heldCount++;
    // exclusive grants write no `since`; a lease still held after a while writes it (one timer
    // for all leases, not one per grant)
    if (mode === 'exclusive' && this.#sinceTimer === undefined) {
      this.#armSince(RECORD_SINCE_AFTER_MS);
    }
    if (this.#checkInterval > 0 && !this.#checker) {
      this.#checker = setInterval(() => this.#checkAll(), this.#checkInterval);
      this.#checker.unref();
    }
    emitAcquired(this.events, this.name, lease, started);
    return lease;
  }

  #armSince(ms: number): void {
    this.#sinceTimer = setTimeout(() => this.#recordSince(), ms);
    this.#sinceTimer.unref();
  }

  /** Writes `since` of exclusive leases held RECORD_SINCE_AFTER_MS or longer (for holder()). */
  #recordSince(): void {
    this.#sinceTimer = undefined;
    if (this.#heldCount === 0) return;
    const now = Date.now();
    let next = Infinity;
    for (const state of this.#states.values()) {
      for (const lease of state.leases) {
        if (lease.mode !== 'exclusive' || lease.sinceWritten || lease.isLost) continue;
        const age = now - lease.acquiredAt;
        if (age < RECORD_SINCE_AFTER_MS) {
          next = Math.min(next, RECORD_SINCE_AFTER_MS - age);
          continue;
        }
        try {
          writeExclusiveSince(state, lease.held.fd, lease.acquiredAt);
          lease.sinceWritten = true;
        } catch {
          // diagnostic only: holder() then reports the time it is asked as `since`
        }
      }
    }
    if (next !== Infinity) this.#armSince(Math.max(1, next));
  }

  #checkAll(): void {
    if (this.#heldCount === 0) {
      if (this.#checker) clearInterval(this.#checker);
      this.#checker = undefined;
      return;
    }
    for (const state of this.#states.values()) {
      for (const lease of state.leases) this.#check(lease);
    }
  }

  #check(lease: FileLease): void {
    if (lease.isLost) return;
    let ok = false;
    try {
      const st = statSync(lease.state.path);
      ok = st.ino === lease.held.ino && st.dev === lease.held.dev;
    } catch {
      ok = false;
    }
    if (!ok) lease.markLost('lock file was removed or replaced');
  }

  #release(lease: FileLease): void | Promise<void> {
    if (!lease.state.leases.delete(lease)) return;
    if (lease.mode === 'exclusive' || lease.isLost) {
      if (lease.sinceWritten && !lease.isLost) {
        try {
          writeExclusiveSince(lease.state, lease.held.fd, 0); // the next holder's is not known yet
        } catch {
          // diagnostic only
        }
      }
      return this.#unlock(lease);
    }
    const { held } = lease;
    if (unrecordShared(held.fd, held.token)) return this.#unlock(lease);
    // the metadata lock is held for a few syscalls at most by another shared holder: retry soon
    return (async () => {
      try {
        for (let i = 0; i < 200; i++) {
          await new Promise((r) => setTimeout(r, 1));
          if (unrecordShared(held.fd, held.token)) return;
        }
      } finally {
        this.#unlock(lease);
      }
    })();
  }

  #unlock(lease: FileLease): void {
    const { state, held } = lease;
    try {
      fsx.unlock(held.fd, LOCK_OFFSET, 1);
    } finally {
      if (lease.isLost) closeSync(held.fd);
      else this.#putBack(state, held.fd, held.ino, held.dev);
      this.#heldCount--; // the checker stops itself at its next tick when nothing is held
      state.wake?.();
      this.#maybeForget(state);
    }
  }
}

function positive(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value > 0) || !Number.isFinite(value)) {
    throw new TypeError(`FileLock: ${name} must be a number > 0, got ${describe(value)}`);
  }
  return value;
}

function nonNegative(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value >= 0) || !Number.isFinite(value)) {
    throw new TypeError(`FileLock: ${name} must be a number >= 0, got ${describe(value)}`);
  }
  return value;
}

function nextToken(previous: bigint): bigint {
  const floor = BigInt(Date.now()) * 1000n;
  return previous >= floor ? previous + 1n : floor;
}

/** True when the file is the one of the cache, and nobody wrote it since our own last write. */
function unchangedSince(
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

/** The size a write sets when the file had `size`: the next step of the write count (see SIZE_BASE). */
function nextSize(size: number): number {
  const n = size >= SIZE_BASE && size < SIZE_BASE + SIZE_SPAN ? size - SIZE_BASE + 1 : 0;
  return SIZE_BASE + (n % SIZE_SPAN);
}

/** Ends a write: moves the size one step (see SIZE_BASE) from `sizeBefore`. */
function bumpSize(fd: number, sizeBefore: number): void {
  ftruncateSync(fd, nextSize(sizeBefore));
}

const readBuf = Buffer.allocUnsafe(READ_SIZE);

/** Record layout: `<token, 20 digits>\n<JSON record>\n`, then a hole up to the size (see SIZE_BASE). */
function readRecord(fd: number): { token: bigint; record: FileRecord | undefined } {
  // most records are short: read a page first, the rest only when the record does not end there
  let n = readSync(fd, readBuf, 0, 4096, 0);
  let end = n > 21 ? readBuf.subarray(0, n).indexOf(10, 21) : -1;
  if (end < 0 && n === 4096) {
    n = readSync(fd, readBuf, 0, READ_SIZE, 0);
    end = readBuf.subarray(0, n).indexOf(10, 21);
  }
  if (n < 21) return { token: 0n, record: undefined };
  let token = 0n;
  const digits = readBuf.toString('latin1', 0, 20).trim();
  if (/^\d+$/.test(digits)) token = BigInt(digits);
  let record: FileRecord | undefined;
  if (end > 21) {
    try {
      const parsed = JSON.parse(readBuf.toString('utf8', 21, end)) as FileRecord;
      if (parsed && parsed.v === 1 && Array.isArray(parsed.holders)) record = parsed;
    } catch {
      record = undefined;
    }
  }
  return { token, record };
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
 */
function reserveExclusive(state: KeyState, fd: number, sizeBefore: number): bigint {
  state.cache = undefined;
  const now = Date.now();
  const previous = readCounter(fd);
  // numbers while the counter is a safe integer (it is, until the 23rd century); bigints beyond
  if (typeof previous === 'number' && now < 1e13) {
    const floor = now * 1000;
    const first = previous >= floor ? previous + 1 : floor;
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
      return BigInt(first);
    }
  }
  const next = nextToken(BigInt(previous));
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
 */
function writeExclusiveSince(state: KeyState, fd: number, since: number): void {
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

/** Shared grant: advances the counter and appends us to the holders, under the metadata lock. */
function grantShared(fd: number): bigint | undefined {
  if (!fsx.tryLock(fd, META_OFFSET, 1, { shared: false })) return undefined;
  try {
    // other shared holders write under the metadata lock too: the size is read under it
    const sizeBefore = fstatSync(fd).size;
    const { token, record } = readRecord(fd);
    const next = nextToken(token);
    const holders =
      record?.mode === 'shared'
        ? record.holders.filter((h) => h.host !== HOST || pidAlive(h.pid))
        : [];
    holders.push({ pid: process.pid, host: HOST, since: Date.now(), token: next.toString() });
    writeRecord(fd, next, { v: 1, mode: 'shared', holders });
    bumpSize(fd, sizeBefore);
    return next;
  } finally {
    fsx.unlock(fd, META_OFFSET, 1);
  }
}

/** Removes this shared holder from the record; false when the metadata lock is busy. */
function unrecordShared(fd: number, token: bigint): boolean {
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
  if (n < 20) return 0;
  let value = 0;
  for (let i = 0; i < 20; i++) {
    const digit = tokenBuf[i]! - 48;
    if (digit < 0 || digit > 9) return 0;
    value = value * 10 + digit;
  }
  return Number.isSafeInteger(value) ? value : BigInt(tokenBuf.toString('latin1', 0, 20));
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
  // the record stays below SIZE_BASE: a very long list of shared holders keeps its oldest ones
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
