import { createHash } from 'node:crypto';
import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  mkdirSync,
  openSync,
  statSync,
} from 'node:fs';
import { join, resolve } from 'node:path';
import {
  backoffDelay,
  nonNegativeIntegerOption,
  nonNegativeOption,
  positiveOption,
  showValue,
} from '@rigging/core';
import type {
  AcquireOptions,
  Clock,
  Lease,
  LockHolder,
  LockMode,
  LockProvider,
} from '@rigging/core';
import {
  abortedError,
  emitAcquired,
  newEmitter,
  validateClock,
  validateKey,
  validateRequest,
  type LeaseImpl,
  type LockEmitter,
  type ProviderBaseOptions,
} from './common.js';
import { LocksError } from './errors.js';
import { WaitQueue } from './queue.js';
import { pause } from './timers.js';
import { waitInQueue } from './wait.js';
import { fsx, loadNative } from './file-native.js';
import { pollKey } from './file-poller.js';
import {
  LOCK_OFFSET,
  grantShared,
  readHolder,
  reserveExclusive,
  unchangedSince,
  unrecordShared,
  writeExclusiveSince,
} from './file-record.js';
import { FileLease, type Held, type KeyState } from './file-state.js';
import { TokenSource } from './file-tokens.js';
import { HeldLeases } from './file-watch.js';

const OWNER = 'FileLock';

const SHARED = { shared: true };
const STAT_OPTIONS = { throwIfNoEntry: false } as const;
const EXCLUSIVE = { shared: false };

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
    throw new TypeError(`lock key must be well-formed Unicode, got ${showValue(key)}`);
  }
  if (encoded.length > 180) {
    encoded = `${encoded.slice(0, 120)}~${createHash('sha256').update(key).digest('hex').slice(0, 40)}`;
  }
  return encoded;
}

function isErrno(error: unknown, code: string): boolean {
  return (error as { code?: unknown } | null)?.code === code;
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
 * holders), and never goes below the clock in microseconds, so tokens keep increasing even if a lock
 * file is deleted by hand.
 */
export class FileLock implements LockProvider {
  /** The lock directory, as an absolute path. */
  readonly dir: string;
  /** The emitter of this provider's `lock:*` events (the `events` option, or a new one). */
  readonly events: LockEmitter;
  /** The provider's name, as its events report it (the `name` option, default `'file'`). */
  readonly name: string;
  readonly #pollDelay: (retry: number) => number;
  #maxIdleFds: number;
  #states = new Map<string, KeyState>();
  #idle = new Set<KeyState>();
  readonly #held: HeldLeases;
  readonly #clock: Clock;
  /** Tokens above every grant of this FileLock, any key (see TokenSource). */
  readonly #tokens = new TokenSource();
  #onRelease = (lease: LeaseImpl) => this.#release(lease as FileLease);

  constructor(options: FileLockOptions | string) {
    const opts: FileLockOptions = typeof options === 'string' ? { dir: options } : options;
    if (typeof opts?.dir !== 'string' || opts.dir.length === 0) {
      throw new TypeError(`FileLock: dir must be a non-empty string, got ${showValue(opts?.dir)}`);
    }
    this.dir = resolve(opts.dir);
    loadNative();
    this.events = opts.events ?? newEmitter();
    this.name = opts.name ?? 'file';
    const pollMin = positiveOption(OWNER, 'pollMinMs', opts.pollMinMs, 1);
    const pollMax = Math.max(pollMin, positiveOption(OWNER, 'pollMaxMs', opts.pollMaxMs, 16));
    // doubling from pollMinMs up to pollMaxMs, ±25% so that waiting processes spread out
    this.#pollDelay = backoffDelay(OWNER, { initialMs: pollMin, maxMs: pollMax, jitter: 0.25 });
    const checkInterval = nonNegativeOption(OWNER, 'checkIntervalMs', opts.checkIntervalMs, 1000);
    this.#maxIdleFds = nonNegativeIntegerOption(OWNER, 'maxIdleFds', opts.maxIdleFds, 64);
    this.#clock = validateClock('FileLock', opts.clock);
    this.#held = new HeldLeases(this.#clock, checkInterval, this.#states);
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
      const started = this.#clock.now();
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
          clock: this.#clock,
        },
        (g) => {
          const node = state.queue.push({ mode, g });
          if (!state.polling) this.#poll(state);
          return () => {
            state.queue.remove(node);
            state.wake?.();
          };
        },
      );
      // granted by the poller, which counted the grant: the lease now holds the key
      state.granting--;
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
    return Promise.resolve(this.#lease(state, mode, held, this.#clock.now()));
  }

  /** @internal The file level's `checkKey`, for TwoLevelLock (see `FileLevel` in file-level.ts). */
  checkKey(key: string): void {
    if (!this.#states.has(key)) encodeLockKey(key);
  }

  /** @internal The file level's `tryNow`, for TwoLevelLock (see `FileLevel` in file-level.ts). */
  tryNow(key: string, mode: LockMode, started: number): Lease | undefined {
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
    this.#held.stop();
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
        granting: 0,
        idleFd: undefined,
        idleIno: 0,
        idleDev: 0,
      };
      this.#states.set(key, state);
    }
    return state;
  }

  #maybeForget(state: KeyState): void {
    if (state.queue.size > 0 || state.polling || state.leases.size > 0 || state.granting > 0)
      return;
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

  /**
   * Closes the key's kept descriptor and forgets the key. Only for a key with nothing held or
   * awaited: one `#maybeForget` let through, or one in the idle set (it leaves the set at its
   * next try).
   */
  #closeIdle(state: KeyState): void {
    this.#idle.delete(state);
    if (state.idleFd !== undefined) {
      closeSync(state.idleFd);
      state.idleFd = undefined;
    }
    if (this.#states.get(state.key) === state) this.#states.delete(state.key);
  }

  #openFile(state: KeyState): number {
    try {
      return openSync(state.path, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o644);
    } catch (error) {
      if (!isErrno(error, 'ENOENT')) throw error;
      // the directory is missing (not created yet, or removed): create it, then open again
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
      // Below, a descriptor that is closed takes its lock with it (it is the only one of its open
      // file description): only one put back for the next grant is unlocked first.
      try {
        if (!fsx.tryLock(fd, LOCK_OFFSET, 1, mode === 'shared' ? SHARED : EXCLUSIVE)) {
          this.#putBack(state, fd, ino, dev);
          return undefined;
        }
        // the path must still name the file we locked (one stat; ENOENT gives undefined)
        const st = statSync(state.path, STAT_OPTIONS);
        if (st === undefined || st.ino !== ino || st.dev !== dev) {
          // the file was removed or replaced after we opened it: this lock guards nothing
          closeSync(fd);
          continue;
        }
        let token: bigint | undefined;
        if (mode === 'exclusive') {
          const c = state.cache;
          if (c !== undefined && c.next <= c.hi && unchangedSince(c, st)) {
            // nobody wrote the file since our last write: the counter there is still our `hi`
            token = this.#tokens.issued(BigInt(c.next++));
          } else token = reserveExclusive(state, this.#tokens, fd, st.size, this.#clock.now());
        } else {
          state.cache = undefined;
          token = grantShared(fd, this.#tokens, this.#clock.now());
        }
        if (token === undefined) {
          // another shared holder is updating the record right now: treat as busy, retry soon
          fsx.unlock(fd, LOCK_OFFSET, 1);
          this.#putBack(state, fd, ino, dev);
          return undefined;
        }
        return { fd, ino, dev, token };
      } catch (error) {
        closeSync(fd);
        throw error;
      }
    }
    throw new LocksError(
      'locks.file_replaced',
      `lock file ${state.path} keeps being removed or replaced; giving up`,
      { details: { key: state.key, path: state.path } },
    );
  }

  #readHolder(path: string, fd?: number): LockHolder | undefined {
    return readHolder(path, this.#clock.now(), fd);
  }

  /**
   * Starts the key's poller (see `pollKey`); it forgets the key once it stops, if idle. A grant
   * counts in `state.granting` until its waiter has made the lease (see `#wait`).
   */
  #poll(state: KeyState): void {
    void pollKey(
      state,
      (waiter) => {
        const held = this.#tryOnce(state, waiter.mode);
        if (held) state.granting++;
        return held;
      },
      this.#pollDelay,
      this.#clock,
      () => this.#maybeForget(state),
    );
  }

  #lease(state: KeyState, mode: LockMode, held: Held, started: number): Lease {
    const lease = new FileLease({
      key: state.key,
      mode,
      token: held.token,
      provider: this.name,
      events: this.events,
      clock: this.#clock,
      onRelease: this.#onRelease,
    });
    lease.held = held;
    lease.state = state;
    state.leases.add(lease);
    this.#held.added(lease);
    emitAcquired(this.events, this.name, lease, started);
    return lease;
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
          await pause(this.#clock, 1).done;
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
      this.#held.removed();
      state.wake?.();
      this.#maybeForget(state);
    }
  }
}
