import {
  abortedError,
  validateKey,
  validateMode,
  validateRequest,
  validateTimeout,
  describe,
  validateClock,
} from './common.js';
import { WaitQueue } from './queue.js';
import { waitInQueue, type Grant } from './wait.js';
import type { Clock, LockMode } from '@rigging/core';

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
      throw new TypeError(`Semaphore permits must be an integer >= 1, got ${describe(permits)}`);
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
      throw new TypeError(`weight must be an integer in 1..${this.#max}, got ${describe(weight)}`);
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

  isLocked(): boolean {
    return this.#locked;
  }

  get waiting(): number {
    return this.#queue.size;
  }

  tryAcquire(): Releaser | undefined {
    if (this.#locked) return undefined;
    this.#locked = true;
    return this.#releaser();
  }

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

// ---------------------------------------------------------------------------------------------
// Reader/writer core, shared by ReadWriteLock, KeyedLock and the in-process providers

/**
 * Who goes first when a reader/writer lock is contended. Writers are never starved:
 * - `'fifo'` (default): strict arrival order; adjacent readers are admitted together.
 * - `'write'`: a waiting writer goes before every waiting reader (readers may wait long under a
 *   constant stream of writers).
 * - `'read'`: phase-fair; when a writer releases, every waiting reader is admitted at once
 *   (even those that came after waiting writers), then the oldest writer. New readers never
 *   overtake a waiting writer while readers hold the lock.
 */
export type RwPreference = 'fifo' | 'write' | 'read';

interface RwWaiter {
  mode: LockMode;
  g: Grant<void>;
}

/** @internal */
export class RwCore {
  readers = 0;
  writer = false;
  queue = new WaitQueue<RwWaiter>();
  lastPhase: 'read' | 'write' = 'write';
  readonly preference: RwPreference;
  readonly clock: Clock | undefined;
  onIdle: (() => void) | undefined;

  constructor(preference: RwPreference, clock?: Clock) {
    this.preference = preference;
    this.clock = clock;
  }

  get idle(): boolean {
    return this.readers === 0 && !this.writer && this.queue.size === 0;
  }

  tryAcquire(mode: LockMode): boolean {
    if (this.writer || this.queue.size > 0) return false;
    if (mode === 'exclusive') {
      if (this.readers > 0) return false;
      this.writer = true;
      this.lastPhase = 'write';
    } else {
      this.readers++;
      this.lastPhase = 'read';
    }
    return true;
  }

  /**
   * Takes the lock now (`undefined`) or queues; `timeoutMs` is validated by the caller and the
   * caller rejects an already-aborted `signal` before calling.
   */
  acquire(
    mode: LockMode,
    key: string,
    timeoutMs: number | undefined,
    signal: AbortSignal | undefined,
  ): Promise<void> | undefined {
    if (this.tryAcquire(mode)) return undefined;
    return waitInQueue<void>({ key, timeoutMs, signal, clock: this.clock }, (g) => {
      const node = this.queue.push({ mode, g });
      return () => {
        this.queue.remove(node);
        this.dispatch();
        if (this.idle) this.onIdle?.();
      };
    });
  }

  release(mode: LockMode): void {
    if (mode === 'exclusive') this.writer = false;
    else this.readers--;
    this.dispatch();
    if (this.idle) this.onIdle?.();
  }

  dispatch(): void {
    if (this.writer || this.queue.size === 0) return;
    switch (this.preference) {
      case 'fifo': {
        for (let n = this.queue.head; n; n = this.queue.head) {
          if (n.value.mode === 'exclusive') {
            if (this.readers === 0) this.#grant(n.value, n);
            return;
          }
          this.#grant(n.value, n);
        }
        return;
      }
      case 'write': {
        const w = this.#firstWriter();
        if (w) {
          if (this.readers === 0) this.#grant(w.value, w);
          return;
        }
        this.#grantAllReaders();
        return;
      }
      case 'read': {
        const w = this.#firstWriter();
        if (this.readers > 0) {
          if (!w) this.#grantAllReaders();
          return;
        }
        const hasReader = this.#hasReader();
        if (hasReader && (this.lastPhase === 'write' || !w)) this.#grantAllReaders();
        else if (w) this.#grant(w.value, w);
        return;
      }
    }
  }

  #firstWriter() {
    for (const n of this.queue) if (n.value.mode === 'exclusive') return n;
    return undefined;
  }

  #hasReader(): boolean {
    for (const n of this.queue) if (n.value.mode === 'shared') return true;
    return false;
  }

  #grantAllReaders(): void {
    for (let n = this.queue.head; n;) {
      const next = n.next;
      if (n.value.mode === 'shared') this.#grant(n.value, n);
      n = next;
    }
  }

  #grant(w: RwWaiter, node: Parameters<WaitQueue<RwWaiter>['remove']>[0]): void {
    this.queue.remove(node);
    if (w.mode === 'exclusive') {
      this.writer = true;
      this.lastPhase = 'write';
    } else {
      this.readers++;
      this.lastPhase = 'read';
    }
    w.g.grant();
  }
}

/** @internal The `preference` option, `'fifo'` when omitted. */
export function checkPreference(p: unknown): RwPreference {
  if (p === undefined) return 'fifo';
  if (p !== 'fifo' && p !== 'write' && p !== 'read') {
    throw new TypeError(`preference must be 'fifo', 'write' or 'read', got ${describe(p)}`);
  }
  return p;
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

  get writer(): boolean {
    return this.#core.writer;
  }

  get waiting(): number {
    return this.#core.queue.size;
  }

  tryAcquire(mode: LockMode = 'exclusive'): Releaser | undefined {
    validateMode(mode);
    return this.#core.tryAcquire(mode) ? this.#releaser(mode) : undefined;
  }

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

  runExclusive<T>(fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(fn, { ...options, mode: 'exclusive' });
  }

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
  #locks = new Map<string, RwCore>();
  readonly #preference: RwPreference;
  readonly #clock: Clock;

  constructor(options: RwOptions = {}) {
    this.#preference = checkPreference(options.preference);
    this.#clock = validateClock('KeyedLock', options.clock);
  }

  /** Keys currently held or waited for. */
  get size(): number {
    return this.#locks.size;
  }

  isLocked(key: string): boolean {
    const core = this.#locks.get(key);
    return core !== undefined && (core.writer || core.readers > 0);
  }

  tryAcquire(key: string, mode: LockMode = 'exclusive'): Releaser | undefined {
    validateKey(key);
    validateMode(mode);
    const core = this.#core(key);
    if (core.tryAcquire(mode)) return this.#releaser(core, mode);
    if (core.idle) this.#locks.delete(key);
    return undefined;
  }

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
    const core = this.#core(key);
    const wait = core.acquire(mode, key, timeoutMs, signal);
    if (!wait) return Promise.resolve(this.#releaser(core, mode));
    return wait.then(() => this.#releaser(core, mode));
  }

  runExclusive<T>(key: string, fn: () => T | Promise<T>, options: WaitOptions = {}): Promise<T> {
    return this.#run(key, fn, { ...options, mode: 'exclusive' });
  }

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

  #core(key: string): RwCore {
    let core = this.#locks.get(key);
    if (!core) {
      const created = new RwCore(this.#preference, this.#clock);
      created.onIdle = () => {
        if (this.#locks.get(key) === created) this.#locks.delete(key);
      };
      this.#locks.set(key, (core = created));
    }
    return core;
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
