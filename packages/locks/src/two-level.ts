import type {
  AcquireOptions,
  Clock,
  Lease,
  LockHolder,
  LockMode,
  LockProvider,
} from '@rigging/core';
import {
  LeaseImpl,
  abortedError,
  validateClock,
  emitAcquired,
  newEmitter,
  validateRequest,
  type LockEmitter,
} from './common.js';
import { FileLock, type FileLockOptions } from './file.js';
import type { FileLevel } from './file-level.js';
import { KeyedCores, checkPreference, type RwCore, type RwPreference } from './rw-core.js';

/** Options of {@link TwoLevelLock}: those of {@link FileLock}, plus in-process fairness. */
export interface TwoLevelLockOptions extends FileLockOptions {
  /** Fairness of the in-process level. @default 'fifo' */
  preference?: RwPreference;
}

/**
 * An in-process reader/writer lock per key in front of a {@link FileLock}, as one
 * {@link LockProvider}: waiters of this process queue in memory (FIFO) and only the one at the
 * front goes to the file, so N local waiters cost one file poller. Token, `lost` and `holder()`
 * come from the file level.
 */
export class TwoLevelLock implements LockProvider {
  /** The emitter of this provider's `lock:*` events (the `events` option, or a new one). */
  readonly events: LockEmitter;
  /** The provider's name, as its events report it (the `name` option, default `'two-level'`). */
  readonly name: string;
  /** The file level (its own events are separate). */
  readonly file: FileLock;
  /** The same file level, through the interface this class relies on (see FileLevel). */
  readonly #fileLevel: FileLevel;
  readonly #locks: KeyedCores;
  readonly #clock: Clock;

  constructor(options: TwoLevelLockOptions | string) {
    const opts: TwoLevelLockOptions = typeof options === 'string' ? { dir: options } : options;
    this.events = opts.events ?? newEmitter();
    this.name = opts.name ?? 'two-level';
    this.file = new FileLock({ ...opts, events: newEmitter(), name: `${this.name}/file` });
    this.#fileLevel = this.file;
    this.#clock = validateClock('TwoLevelLock', opts.clock);
    this.#locks = new KeyedCores(checkPreference(opts.preference), this.#clock);
  }

  /** The lock directory of the file level, as an absolute path. */
  get dir(): string {
    return this.file.dir;
  }

  /** The lock file of `key`. */
  pathOf(key: string): string {
    return this.file.pathOf(key);
  }

  acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    let mode: LockMode;
    let timeoutMs: number | undefined;
    let core: RwCore;
    let wait: Promise<void> | undefined;
    const started = this.#clock.now();
    const { signal } = options;
    try {
      ({ mode, timeoutMs } = validateRequest('TwoLevelLock', key, options));
      // a key with a live in-process lock was checked when that lock was made
      if (!this.#locks.get(key)) this.#fileLevel.checkKey(key);
      if (signal?.aborted) throw abortedError(key, signal.reason);
      core = this.#locks.of(key);
      wait = core.acquire(mode, key, timeoutMs, signal);
    } catch (error) {
      return Promise.reject(error);
    }
    const wanted = { timeoutMs, signal };
    if (wait) return this.#afterWait(key, mode, core, wait, wanted, started);
    // the uncontended path: one synchronous try at the file, no promise chain
    let inner: Lease | undefined;
    try {
      inner = this.#fileLevel.tryNow(key, mode, started);
    } catch (error) {
      core.release(mode);
      return Promise.reject(error);
    }
    if (inner) return Promise.resolve(this.#wrap(key, mode, core, inner, started));
    return this.#acquireFile(key, mode, core, wanted, started);
  }

  async #afterWait(
    key: string,
    mode: LockMode,
    core: RwCore,
    wait: Promise<void>,
    options: AcquireOptions,
    started: number,
  ): Promise<Lease> {
    if (this.events.hasListeners('lock:waiting')) {
      this.events.emit('lock:waiting', {
        provider: this.name,
        key,
        mode,
        holder: await this.file.holder(key).catch(() => undefined),
        since: started,
      });
    }
    await wait;
    return this.#acquireFile(key, mode, core, options, started);
  }

  /** The front of the in-process queue goes to the file. */
  #acquireFile(
    key: string,
    mode: LockMode,
    core: RwCore,
    options: AcquireOptions,
    started: number,
  ): Promise<Lease> {
    const remaining =
      options.timeoutMs === undefined
        ? undefined
        : Math.max(0, options.timeoutMs - (this.#clock.now() - started));
    return this.file.acquire(key, { mode, timeoutMs: remaining, signal: options.signal }).then(
      (inner) => this.#wrap(key, mode, core, inner, started),
      (error: unknown) => {
        core.release(mode);
        throw error;
      },
    );
  }

  async tryAcquire(key: string, options: { mode?: LockMode } = {}): Promise<Lease | undefined> {
    const { mode } = validateRequest('TwoLevelLock', key, options);
    this.#fileLevel.checkKey(key);
    const core = this.#locks.tryAcquire(key, mode);
    if (!core) return undefined;
    let inner: Lease | undefined;
    try {
      inner = await this.file.tryAcquire(key, { mode });
    } catch (error) {
      core.release(mode);
      throw error;
    }
    if (!inner) {
      core.release(mode);
      return undefined;
    }
    return this.#wrap(key, mode, core, inner, this.#clock.now());
  }

  holder(key: string): Promise<LockHolder | undefined> {
    return this.file.holder(key);
  }

  /** Closes the file level's cached descriptors and stops its lost-lease checker (held leases stay held). */
  close(): void {
    this.file.close();
  }

  #wrap(key: string, mode: LockMode, core: RwCore, inner: Lease, started: number): Lease {
    let localReleased = false;
    const releaseLocal = () => {
      if (localReleased) return;
      localReleased = true;
      core.release(mode);
    };
    const lease = new LeaseImpl({
      key,
      mode,
      token: inner.token,
      provider: this.name,
      events: this.events,
      clock: this.#clock,
      onRelease: () => {
        unwatch();
        let pending: Promise<void> | undefined;
        try {
          pending = inner instanceof LeaseImpl ? inner.releaseNow() : inner.release();
        } catch (error) {
          releaseLocal();
          throw error;
        }
        if (pending === undefined) return releaseLocal();
        return pending.finally(releaseLocal);
      },
    });
    const onLost = () => lease.markLost('file lock lost', inner.lost.reason);
    let unwatch: () => void;
    if (inner instanceof LeaseImpl) {
      // no AbortController per grant: the file lease's `lost` stays lazy
      unwatch = inner.watchLoss(onLost);
      if (inner.isLost) onLost();
    } else if (inner.lost.aborted) {
      onLost();
      unwatch = () => {};
    } else {
      inner.lost.addEventListener('abort', onLost, { once: true });
      unwatch = () => inner.lost.removeEventListener('abort', onLost);
    }
    emitAcquired(this.events, this.name, lease, started);
    return lease;
  }
}
