import type { AcquireOptions, Lease, LockHolder, LockMode, LockProvider } from '@rigging/core';
import {
  LeaseImpl,
  abortedError,
  emitAcquired,
  newEmitter,
  validateRequest,
  type LockEmitter,
} from './common.js';
import { FileLock, type FileLockOptions } from './file.js';
import { RwCore, type RwPreference } from './primitives.js';

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
  readonly events: LockEmitter;
  readonly name: string;
  /** The file level (its own events are separate). */
  readonly file: FileLock;
  #locks = new Map<string, RwCore>();
  #preference: RwPreference;

  constructor(options: TwoLevelLockOptions | string) {
    const opts: TwoLevelLockOptions = typeof options === 'string' ? { dir: options } : options;
    this.events = opts.events ?? newEmitter();
    this.name = opts.name ?? 'two-level';
    this.file = new FileLock({ ...opts, events: newEmitter(), name: `${this.name}/file` });
    this.#preference = opts.preference ?? 'fifo';
  }

  get dir(): string {
    return this.file.dir;
  }

  async acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    const { mode } = validateRequest(key, options);
    this.file.pathOf(key);
    if (options.signal?.aborted) throw abortedError(key, options.signal.reason);
    const started = Date.now();
    const core = this.#core(key);
    const wait = core.acquire(mode, key, options);
    if (wait) {
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
    }
    let inner: Lease;
    try {
      const remaining =
        options.timeoutMs === undefined
          ? undefined
          : Math.max(0, options.timeoutMs - (Date.now() - started));
      inner = await this.file.acquire(key, { mode, timeoutMs: remaining, signal: options.signal });
    } catch (error) {
      core.release(mode);
      throw error;
    }
    return this.#wrap(key, mode, core, inner, started);
  }

  async tryAcquire(key: string, options: { mode?: LockMode } = {}): Promise<Lease | undefined> {
    const { mode } = validateRequest(key, options);
    this.file.pathOf(key);
    const core = this.#core(key);
    if (!core.tryAcquire(mode)) {
      if (core.idle) this.#locks.delete(key);
      return undefined;
    }
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
    return this.#wrap(key, mode, core, inner, Date.now());
  }

  holder(key: string): Promise<LockHolder | undefined> {
    return this.file.holder(key);
  }

  close(): void {
    this.file.close();
  }

  #core(key: string): RwCore {
    let core = this.#locks.get(key);
    if (!core) {
      const created = new RwCore(this.#preference);
      created.onIdle = () => {
        if (this.#locks.get(key) === created) this.#locks.delete(key);
      };
      this.#locks.set(key, (core = created));
    }
    return core;
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
      onRelease: async () => {
        inner.lost.removeEventListener('abort', onLost);
        try {
          await inner.release();
        } finally {
          releaseLocal();
        }
      },
    });
    const onLost = () => lease.markLost('file lock lost', inner.lost.reason);
    if (inner.lost.aborted) onLost();
    else inner.lost.addEventListener('abort', onLost, { once: true });
    emitAcquired(this.events, this.name, lease, started);
    return lease;
  }
}
