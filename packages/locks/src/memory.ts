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
  type ProviderBaseOptions,
} from './common.js';
import { RwCore, checkPreference, type RwPreference } from './rw-core.js';

/** Options of {@link InProcessLockProvider}. */
export interface InProcessLockOptions extends ProviderBaseOptions {
  /** Fairness between shared and exclusive waiters. @default 'fifo' */
  preference?: RwPreference;
  /** Name used in events. @default 'memory' */
  name?: string;
}

interface Entry {
  core: RwCore;
  leases: Set<LeaseImpl>;
}

/**
 * A {@link LockProvider} inside one process: shared/exclusive per key, FIFO (see
 * {@link RwPreference}), fencing tokens from one process-wide counter (so strictly increasing per
 * key). `revoke(key)` simulates a lost lease, for tests of lease-loss handling.
 */
export class InProcessLockProvider implements LockProvider {
  /** The emitter of this provider's `lock:*` events (the `events` option, or a new one). */
  readonly events: LockEmitter;
  /** The provider's name, as its events report it (the `name` option, default `'memory'`). */
  readonly name: string;
  #entries = new Map<string, Entry>();
  #preference: RwPreference;
  readonly #clock: Clock;
  #counter = 0n;

  constructor(options: InProcessLockOptions = {}) {
    this.events = options.events ?? newEmitter();
    this.name = options.name ?? 'memory';
    this.#preference = checkPreference(options.preference);
    this.#clock = validateClock('InProcessLockProvider', options.clock);
  }

  /** Keys held or waited for now (idle keys are dropped). */
  get size(): number {
    return this.#entries.size;
  }

  async acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    const { mode, timeoutMs } = validateRequest('InProcessLockProvider', key, options);
    const { signal } = options;
    if (signal?.aborted) throw abortedError(key, signal.reason);
    const started = this.#clock.now();
    const entry = this.#entry(key);
    const wait = entry.core.acquire(mode, key, timeoutMs, signal);
    if (wait) {
      if (this.events.hasListeners('lock:waiting')) {
        this.events.emit('lock:waiting', {
          provider: this.name,
          key,
          mode,
          holder: this.#holder(entry),
          since: started,
        });
      }
      await wait;
    }
    return this.#grant(key, mode, entry, started);
  }

  async tryAcquire(key: string, options: { mode?: LockMode } = {}): Promise<Lease | undefined> {
    const { mode } = validateRequest('InProcessLockProvider', key, options);
    const entry = this.#entry(key);
    if (!entry.core.tryAcquire(mode)) {
      if (entry.core.idle && entry.leases.size === 0) this.#entries.delete(key);
      return undefined;
    }
    return this.#grant(key, mode, entry, this.#clock.now());
  }

  holder(key: string): Promise<LockHolder | undefined> {
    const entry = this.#entries.get(key);
    return Promise.resolve(entry ? this.#holder(entry) : undefined);
  }

  /** Marks every current lease of `key` lost and frees the key (as a dead session would). */
  revoke(key: string, reason = 'revoked'): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    for (const lease of [...entry.leases]) {
      lease.markLost(reason);
      this.#free(key, entry, lease);
    }
  }

  #holder(entry: Entry): LockHolder | undefined {
    let first: LeaseImpl | undefined;
    for (const l of entry.leases) if (!first || l.acquiredAt < first.acquiredAt) first = l;
    if (!first) return undefined;
    return {
      mode: first.mode,
      since: first.acquiredAt,
      pid: process.pid,
      count: entry.leases.size,
    };
  }

  #entry(key: string): Entry {
    let entry = this.#entries.get(key);
    if (!entry) {
      const created: Entry = { core: new RwCore(this.#preference, this.#clock), leases: new Set() };
      created.core.onIdle = () => {
        if (created.leases.size === 0 && this.#entries.get(key) === created)
          this.#entries.delete(key);
      };
      this.#entries.set(key, (entry = created));
    }
    return entry;
  }

  #grant(key: string, mode: LockMode, entry: Entry, started: number): Lease {
    const lease: LeaseImpl = new LeaseImpl({
      key,
      mode,
      token: ++this.#counter,
      provider: this.name,
      events: this.events,
      clock: this.#clock,
      onRelease: (l) => this.#free(key, entry, l),
    });
    entry.leases.add(lease);
    emitAcquired(this.events, this.name, lease, started);
    return lease;
  }

  #free(key: string, entry: Entry, lease: LeaseImpl): void {
    if (!entry.leases.delete(lease)) return;
    entry.core.release(lease.mode);
  }
}

/** A new {@link InProcessLockProvider}. */
export function memoryLockProvider(options: InProcessLockOptions = {}): InProcessLockProvider {
  return new InProcessLockProvider(options);
}
