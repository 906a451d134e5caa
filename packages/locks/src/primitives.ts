import {
  abortedError,
  validateKey,
  validateMode,
  validateRequest,
  validateTimeout,
  validateClock,
} from './common.js';
import { WaitQueue } from './queue.js';
import { KeyedCores, RwCore, checkPreference, type RwPreference } from './rw-core.js';
import { waitInQueue, type Grant } from './wait.js';
import { showValue, type Clock, type LockMode } from '@rigging/core';

/** Releases what was acquired. Safe to call twice (the second call is a no-op). */
export type Releaser = () => void;

/** Options of {@link Mutex} and {@link Semaphore}. */
export interface PrimitiveOptions {
  /** The clock wait timeouts run on (tests pass core's `manualClock()`). @default systemClock */
  clock?: Clock;
}

/** Options of every wait in this package. */
export interface WaitOptions {
  /** Give up after this long (rejects with `locks.timeout`). Waits forever when omitted. */
  timeoutMs?: number | undefined;
  /** Abort the wait (rejects with `locks.aborted`, `cause` = `signal.reason`). */
  signal?: AbortSignal | undefined;
}

// ---------------------------------------------------------------------------------------------
// Semaphore

interface SemWaiter {
  weight: number;
  g: Grant<Releaser>;
}

/**
 * A counting semaphore with strict FIFO order (a heavy waiter at the head is not overtaken).
 * Same shape as async-mutex's `Semaphore` (`acquire`, `runExclusive`, `getValue`), plus per-wait
 * timeouts and aborts that remove the waiter from the queue at once.
 */
export class Semaphore {
  #value: number;
  readonly #max: number;
  readonly #clock: Clock;
  #queue = new WaitQueue<SemWaiter>();

  constructor(permits: number, options: PrimitiveOptions = {}) {
    if (!Number.isInteger(permits) || permits < 1) {
      throw new TypeError(`Semaphore permits must be an integer >= 1, got ${showValue(permits)}`);
    }
    this.#value = permits;
    this.#max = permits;
    this.#clock = validateClock('Semaphore', options.clock);
  }

  /** Free permits now. */
  getValue(): number {
    return this.#value;
  }

  /** Number of queued waiters. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** True when no permit is free. */
  isLocked(): boolean {
    return this.#value <= 0;
  }

  /** Takes `weight` permits without waiting; `undefined` when not available now. */
  tryAcquire(weight = 1): Releaser | undefined {
    this.#checkWeight(weight);
    if (this.#queue.size === 0 && this.#value >= weight) {
      this.#value -= weight;
      return this.#releaser(weight);
    }
    return undefined;
  }

  /**
   * Takes `weight` permits (default 1), waiting in FIFO order.
   * @param options - `weight` (an integer in 1..permits, else a `TypeError`), `timeoutMs`, `signal`.
   * @returns An idempotent releaser that gives the permits back.
   * @throws `locks.timeout` when `timeoutMs` elapses; `locks.aborted` when `signal` aborts.
   */
  acquire(options: WaitOptions & { weight?: number } = {}): Promise<Releaser> {
    const weight = options.weight ?? 1;
    let timeoutMs: number | undefined;
    try {
      this.#checkWeight(weight);
      timeoutMs = validateTimeout('Semaphore', options.timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortedError('semaphore', signal.reason));
    if (this.#queue.size === 0 && this.#value >= weight) {
      this.#value -= weight;
      return Promise.resolve(this.#releaser(weight));
    }
    return waitInQueue<Releaser>(
      { key: 'semaphore', timeoutMs, signal, clock: this.#clock },
      (g) => {
        const node = this.#queue.push({ weight, g });
        return () => {
          const wasHead = this.#queue.head === node;
          this.#queue.remove(node);
          if (wasHead) this.#dispatch();
        };
      },
    );
  }

  /** Runs `fn` while holding `weight` permits (see {@link Semaphore.acquire}), released when it settles. */
  async runExclusive<T>(
    fn: () => T | Promise<T>,
    options: WaitOptions & { weight?: number } = {},
  ): Promise<T> {
    const release = await this.acquire(options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #checkWeight(weight: number): void {
    if (!Number.isInteger(weight) || weight < 1 || weight > this.#max) {
      throw new TypeError(`weight must be an integer in 1..${this.#max}, got ${showValue(weight)}`);
    }
  }

  #releaser(weight: number): Releaser {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#value += weight;
      this.#dispatch();
    };
  }

  #dispatch(): void {
    for (;;) {
      const head = this.#queue.head;
      if (!head || head.value.weight > this.#value) return;
      this.#queue.remove(head);
      this.#value -= head.value.weight;
      head.value.g.grant(this.#releaser(head.value.weight));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Mutex

/** A FIFO mutex; `acquire()` resolves with an idempotent releaser. */
export class Mutex {
  #locked = false;
  #queue = new WaitQueue<Grant<Releaser>>();
  readonly #clock: Clock;

  constructor(options: PrimitiveOptions = {}) {
    this.#clock = validateClock('Mutex', options.clock);
  }

  /** True while the mutex is held. */
  isLocked(): boolean {
    return this.#locked;
  }

  /** Number of queued waiters. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** Takes the mutex without waiting; `undefined` when it is held. */
  tryAcquire(): Releaser | undefined {
    if (this.#locked) return undefined;
    this.#locked = true;
    return this.#releaser();
  }

  /**
   * Takes the mutex, waiting in FIFO order.
   * @returns An idempotent releaser.
   * @throws `locks.timeout` when `timeoutMs` elapses; `locks.aborted` when `signal` aborts.
   */
  acquire(options?: WaitOptions): Promise<Releaser> {
    let timeoutMs: number | undefined;
    if (options) {
      try {
        timeoutMs = validateTimeout('Mutex', options.timeoutMs);
      } catch (error) {
        return Promise.reject(error);
      }
      if (options.signal?.aborted)
        return Promise.reject(abortedError('mutex', options.signal.reason));
    }
    if (!this.#locked) {
      this.#locked = true;
      return Promise.resolve(this.#releaser());
    }
    return waitInQueue<Releaser>(
      { key: 'mutex', timeoutMs, signal: options?.signal, clock: this.#clock },
      (g) => {
        const node = this.#queue.push(g);
        return () => this.#queue.remove(node);
      },
    );
  }

  /** Runs `fn` while holding the mutex, released when it settles. */
  async runExclusive<T>(fn: () => T | Promise<T>, options?: WaitOptions): Promise<T> {
    const release = await this.acquire(options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** Resolves when the mutex is next free (does not take it). */
  async waitForUnlock(options?: WaitOptions): Promise<void> {
    if (!this.#locked) return;
    const release = await this.acquire(options);
    release();
  }

  #releaser(): Releaser {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.#queue.shift();
      if (next) next.grant(this.#releaser());
      else this.#locked = false;
    };
  }
}

/** Options of {@link ReadWriteLock} and {@link KeyedLock}. */
export interface RwOptions extends PrimitiveOptions {
  /** @default 'fifo' */
  preference?: RwPreference;
}

/** A shared/exclusive (reader/writer) lock; see {@link RwPreference} for fairness. */
export class ReadWriteLock {
  #core: RwCore;

  constructor(options: RwOptions = {}) {
    this.#core = new RwCore(
      checkPreference(options.preference),
      validateClock('ReadWriteLock', options.clock),
    );
  }

  /** Current shared holders. */
  get readers(): number {
    return this.#core.readers;
  }

  /** True while a writer (exclusive holder) holds the lock. */
  get writer(): boolean {
    return this.#core.writer;
  }

  /** Number of queued waiters. */
  get waiting(): number {
    return this.#core.queue.size;
  }

  /** Takes the lock in `mode` (default `'exclusive'`) without waiting; `undefined` when not available now. */
  tryAcquire(mode: LockMode = 'exclusive'): Releaser | undefined {
    validateMode(mode);
    return this.#core.tryAcquire(mode) ? this.#releaser(mode) : undefined;
  }

  /**
   * Takes the lock in `mode` (default `'exclusive'`), waiting per the lock's {@link RwPreference}.
   * @returns An idempotent releaser.
   * @throws `locks.timeout` when `timeoutMs` elapses; `locks.aborted` when `signal` aborts.
   */
  acquire(options: WaitOptions & { mode?: LockMode } = {}): Promise<Releaser> {
    let mode: LockMode;
    let timeoutMs: number | undefined;
    try {
      mode = validateMode(options.mode);
      timeoutMs = validateTimeout('ReadWriteLock', options.timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortedError('rwlock', signal.reason));
    const wait = this.#core.acquire(mode, 'rwlock', timeoutMs, signal);
    if (!wait) return Promise.resolve(this.#releaser(mode));
    return wait.then(() => this.#releaser(mode));
  }

  /** Runs `fn` while holding the lock exclusively, released when it settles. */
  runExclusive<T>(fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(fn, { ...options, mode: 'exclusive' });
  }

  /** Runs `fn` while holding the lock shared, released when it settles. */
  runShared<T>(fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(fn, { ...options, mode: 'shared' });
  }

  async #run<T>(fn: () => T | Promise<T>, options: WaitOptions & { mode: LockMode }): Promise<T> {
    const release = await this.acquire(options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #releaser(mode: LockMode): Releaser {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#core.release(mode);
    };
  }
}

/**
 * A reader/writer lock per key. Keys nobody holds or waits for are dropped at once, so memory
 * stays flat however many distinct keys pass through.
 */
export class KeyedLock {
  readonly #locks: KeyedCores;

  constructor(options: RwOptions = {}) {
    this.#locks = new KeyedCores(
      checkPreference(options.preference),
      validateClock('KeyedLock', options.clock),
    );
  }

  /** Keys currently held or waited for. */
  get size(): number {
    return this.#locks.size;
  }

  /** True while `key` is held in any mode. */
  isLocked(key: string): boolean {
    const core = this.#locks.get(key);
    return core !== undefined && (core.writer || core.readers > 0);
  }

  /** Takes `key` in `mode` (default `'exclusive'`) without waiting; `undefined` when not available now. */
  tryAcquire(key: string, mode: LockMode = 'exclusive'): Releaser | undefined {
    validateKey(key);
    validateMode(mode);
    const core = this.#locks.tryAcquire(key, mode);
    return core && this.#releaser(core, mode);
  }

  /**
   * Takes `key` in `mode` (default `'exclusive'`).
   * @returns An idempotent releaser.
   * @throws `TypeError` for a bad key, mode or timeout; `locks.timeout` when `timeoutMs` elapses; `locks.aborted` when `signal` aborts.
   */
  acquire(key: string, options: WaitOptions & { mode?: LockMode } = {}): Promise<Releaser> {
    let request: { mode: LockMode; timeoutMs: number | undefined };
    try {
      request = validateRequest('KeyedLock', key, options);
    } catch (error) {
      return Promise.reject(error);
    }
    const { mode, timeoutMs } = request;
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortedError(key, signal.reason));
    const core = this.#locks.of(key);
    const wait = core.acquire(mode, key, timeoutMs, signal);
    if (!wait) return Promise.resolve(this.#releaser(core, mode));
    return wait.then(() => this.#releaser(core, mode));
  }

  /** Runs `fn` while holding `key` exclusively, released when it settles. */
  runExclusive<T>(key: string, fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(key, fn, { ...options, mode: 'exclusive' });
  }

  /** Runs `fn` while holding `key` shared, released when it settles. */
  runShared<T>(key: string, fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(key, fn, { ...options, mode: 'shared' });
  }

  async #run<T>(
    key: string,
    fn: () => T | Promise<T>,
    options: WaitOptions & { mode: LockMode },
  ): Promise<T> {
    const release = await this.acquire(key, options);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #releaser(core: RwCore, mode: LockMode): Releaser {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      core.release(mode);
    };
  }
}
