// The reader/writer core every lock of this package queues in, and its per-key registry.
import { showValue, type Clock, type LockMode } from '@rigging/core';
import { WaitQueue } from './queue.js';
import { waitInQueue, type Grant } from './wait.js';

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

/** @internal A reader/writer lock's state and FIFO waiter queue, with the fairness of {@link RwPreference}. */
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
    throw new TypeError(`preference must be 'fifo', 'write' or 'read', got ${showValue(p)}`);
  }
  return p;
}

/**
 * @internal One {@link RwCore} per key, created on first use and dropped as soon as it is idle
 * (nobody holds or waits), so memory stays flat however many distinct keys pass through. The
 * in-process level of {@link KeyedLock}, `TwoLevelLock` and the remote providers.
 */
export class KeyedCores {
  readonly #cores = new Map<string, RwCore>();
  readonly #preference: RwPreference;
  readonly #clock: Clock | undefined;

  constructor(preference: RwPreference, clock: Clock | undefined) {
    this.#preference = preference;
    this.#clock = clock;
  }

  /** Keys held or waited for. */
  get size(): number {
    return this.#cores.size;
  }

  /** The core of `key` if it is held or waited for. */
  get(key: string): RwCore | undefined {
    return this.#cores.get(key);
  }

  /** The core of `key`, created when missing (it drops itself once idle). */
  of(key: string): RwCore {
    let core = this.#cores.get(key);
    if (!core) {
      const created = new RwCore(this.#preference, this.#clock);
      created.onIdle = () => {
        if (this.#cores.get(key) === created) this.#cores.delete(key);
      };
      this.#cores.set(key, (core = created));
    }
    return core;
  }

  /** Takes `key` in `mode` now: its core, or `undefined` (leaving nothing behind). */
  tryAcquire(key: string, mode: LockMode): RwCore | undefined {
    const core = this.of(key);
    if (core.tryAcquire(mode)) return core;
    if (core.idle && this.#cores.get(key) === core) this.#cores.delete(key);
    return undefined;
  }
}
