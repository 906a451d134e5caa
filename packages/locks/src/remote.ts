import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import { backoffDelay, positiveOption } from '@rigging/core';
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
  emitAcquired,
  newEmitter,
  timeoutError,
  validateKey,
  validateRequest,
  type LockEmitter,
  type ProviderBaseOptions,
} from './common.js';
import { KeyedCores, type RwCore } from './rw-core.js';
import { after, every, type Cancel } from './timers.js';

/** Options every remote (database, Redis) provider takes. */
export interface RemoteLockOptions extends ProviderBaseOptions {
  /** First retry delay while polling. @default 2 */
  pollMinMs?: number;
  /** Longest retry delay while polling. @default 50 */
  pollMaxMs?: number;
  /** Name used in events. */
  name?: string;
}

/** A grant by a backend: its token, a signal that aborts when it is lost, and its release. */
export interface Granted {
  token: bigint;
  lost: AbortSignal;
  release(): Promise<void>;
}

/** What a remote provider needs from its backend. */
export interface Backend {
  /** The mode waiters of this process queue in (exclusive where the backend has no shared mode). */
  localMode(mode: LockMode): LockMode;
  /**
   * One attempt. `waiting`: the caller will try again until its deadline and calls the function
   * from `beginWait` when it stops (a backend may keep state across attempts, e.g. a writer's gate);
   * false for `tryAcquire`, which must leave nothing behind.
   */
  tryGrant(key: string, id: string, mode: LockMode, waiting: boolean): Promise<Granted | undefined>;
  holder(key: string, id: string): Promise<LockHolder | undefined>;
  /** Calls `wake` when `id` may have become free (PostgreSQL NOTIFY); undefined: poll. */
  subscribe?(id: string, wake: () => void): () => void;
  /** Announces a waiter of `id` to releasers (so they notify); returns the function ending it. */
  beginWait?(id: string): Promise<(() => Promise<void>) | undefined>;
  close(): Promise<void>;
}

/**
 * A heartbeat that runs `tick` every `ms` only while `busy()`: started on demand (no timer churn
 * per grant), it stops itself at the first tick with nothing to do. `ms <= 0` never runs.
 * @internal
 */
export class Heartbeat {
  #cancel: Cancel | undefined;

  constructor(
    readonly clock: Clock,
    readonly ms: number,
    private readonly busy: () => boolean,
    private readonly tick: () => Promise<void>,
  ) {}

  /** Starts the interval if there is work and it is not running. */
  start(): void {
    if (this.ms <= 0 || this.#cancel || !this.busy()) return;
    this.#cancel = every(
      this.clock,
      this.ms,
      () => {
        if (this.busy()) void this.tick();
        else this.stop();
      },
      true,
    );
  }

  stop(): void {
    this.#cancel?.();
    this.#cancel = undefined;
  }
}

/**
 * A grant whose release runs once: `forget` drops the backend's own bookkeeping, then `free` gives
 * the lock back, unless it was lost already.
 * @internal
 */
export function granted(
  token: bigint,
  lost: AbortController,
  forget: () => void,
  free: () => Promise<unknown>,
): Granted {
  let released = false;
  return {
    token,
    lost: lost.signal,
    release: async () => {
      if (released) return;
      released = true;
      forget();
      if (lost.signal.aborted) return;
      await free();
    },
  };
}

/**
 * The leases a backend with TTL grants (SQLite lease table, Redis) holds, by lease id: renewed by
 * a heartbeat while any is held (the backend's `renew` extends every one of them), closed once.
 * @internal
 */
export class RenewedLeases<Held> {
  readonly #leases = new Map<string, Held>();
  readonly #heartbeat: Heartbeat;
  #closed = false;

  /** `renew` runs every `heartbeatMs` while a lease is held. */
  constructor(clock: Clock, heartbeatMs: number, renew: () => Promise<void>) {
    this.#heartbeat = new Heartbeat(clock, heartbeatMs, () => this.#leases.size > 0, renew);
  }

  /** True once {@link RenewedLeases.close} ran: the backend grants nothing more. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Records a granted lease; its renewals start. */
  add(id: string, held: Held): void {
    this.#leases.set(id, held);
    this.#heartbeat.start();
  }

  /** Forgets a released lease (the heartbeat stops at its next tick when none is left). */
  delete(id: string): void {
    this.#leases.delete(id);
  }

  /** The leases held now (a copy: renewals may release some while iterating). */
  values(): Held[] {
    return [...this.#leases.values()];
  }

  /** Stops renewals and grants for good; returns the leases that were held, forgotten now. */
  close(): Held[] {
    this.#closed = true;
    this.#heartbeat.stop();
    const held = [...this.#leases.values()];
    this.#leases.clear();
    return held;
  }
}

/** @internal This machine's host name, as recorded for `holder()`. */
export const HOST = hostname();

/**
 * Cache of {@link lockId}: a pure function of the key, so sharing it across providers is safe.
 * Bounded: cleared when it reaches 4096 keys.
 */
const ids = new Map<string, string>();

/** @internal The backend id of a key: SHA-256, hex (recent keys cached: a hash costs more than a lookup). */
export function lockId(key: string): string {
  let id = ids.get(key);
  if (id === undefined) {
    if (ids.size >= 4096) ids.clear();
    id = createHash('sha256').update(key).digest('hex');
    ids.set(key, id);
  }
  return id;
}

/** @internal Who this process is (`{ pid, host }`), as backends record it. */
export function holderJson(): string {
  return JSON.stringify({ pid: process.pid, host: HOST });
}

/** @internal The `pid`/`host` of a recorded holder (empty when unreadable). */
export function parseHolder(text: unknown): { pid?: number; host?: string } {
  try {
    const v = JSON.parse(String(text)) as { pid?: number; host?: string };
    return {
      ...(typeof v.pid === 'number' ? { pid: v.pid } : {}),
      ...(typeof v.host === 'string' ? { host: v.host } : {}),
    };
  } catch {
    return {};
  }
}

const noop = () => {};
/**
 * The part every remote provider shares: waiters of one process queue in memory per key (FIFO)
 * and only the front one talks to the backend — polling with bounded backoff, or woken by the
 * backend — with timeout and abort; grants become leases whose `lost` follows the backend's.
 */
export abstract class RemoteLockProvider implements LockProvider {
  /** The emitter of this provider's `lock:*` events (the `events` option, or a new one). */
  readonly events: LockEmitter;
  /** The provider's name, as its events report it (the `name` option or the provider's default). */
  readonly name: string;
  readonly #owner: string;
  readonly #clock: Clock;
  #backend: Backend;
  readonly #locks: KeyedCores;
  readonly #pollDelay: (retry: number) => number;
  #fallbackPoll: number;
  /** Set once `ready()` resolved (it stays resolved): later grants skip awaiting it. */
  #isReady = false;
  /** The functions {@link RemoteLockProvider.#watch} calls when a grant's `lost` signal aborts. */
  readonly #watchers = new WeakMap<AbortSignal, Set<() => void>>();

  protected constructor(
    owner: string,
    backend: Backend,
    options: RemoteLockOptions & { fallbackPollMs?: number },
    defaultName: string,
    clock: Clock,
  ) {
    const pollMin = positiveOption(owner, 'pollMinMs', options.pollMinMs, 2);
    const pollMax = Math.max(pollMin, positiveOption(owner, 'pollMaxMs', options.pollMaxMs, 50));
    // doubling from pollMinMs up to pollMaxMs, ±25% so that waiting processes spread out
    this.#pollDelay = backoffDelay(owner, { initialMs: pollMin, maxMs: pollMax, jitter: 0.25 });
    this.#fallbackPoll = positiveOption(owner, 'fallbackPollMs', options.fallbackPollMs, 250);
    this.events = options.events ?? newEmitter();
    this.name = options.name ?? defaultName;
    this.#backend = backend;
    this.#owner = owner;
    this.#clock = clock;
    this.#locks = new KeyedCores('fifo', clock);
  }

  /** Resolves once the backend is ready (schema created, scripts loaded). */
  protected abstract ready(): Promise<unknown>;
  /** Errors retried until the deadline (lost connection, busy database). */
  protected abstract isTransient(error: unknown): boolean;
  /** Reason given to `lease.lost` when the backend loses a grant. */
  protected abstract readonly lostReason: string;

  async acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    const { mode, timeoutMs } = validateRequest(this.#owner, key, options);
    const { signal } = options;
    if (signal?.aborted) throw abortedError(key, signal.reason);
    const started = this.#clock.now();
    const id = lockId(key);
    const localMode = this.#backend.localMode(mode);
    const core = this.#locks.of(key);
    const wait = core.acquire(localMode, key, timeoutMs, signal);
    let emittedWaiting = false;
    const emitWaiting = async () => {
      if (emittedWaiting || !this.events.hasListeners('lock:waiting')) return;
      emittedWaiting = true;
      this.events.emit('lock:waiting', {
        provider: this.name,
        key,
        mode,
        holder: await this.#backend.holder(key, id).catch(() => undefined),
        since: started,
      });
    };
    if (wait) {
      await emitWaiting();
      await wait;
    }
    try {
      if (!this.#isReady) {
        await this.ready();
        this.#isReady = true;
      }
      let retry = 0;
      let endWait: (() => Promise<void>) | undefined;
      try {
        for (;;) {
          if (signal?.aborted) throw abortedError(key, signal.reason);
          let woken = false;
          let wake: (() => void) | undefined;
          const unsubscribe = this.#backend.subscribe?.(id, () => {
            woken = true;
            wake?.();
          });
          try {
            let granted: Granted | undefined;
            try {
              granted = await this.#backend.tryGrant(key, id, mode, true);
            } catch (error) {
              // a lost session or a busy database is retried (a new session is opened) until the
              // deadline; anything else is a real error
              if (!this.isTransient(error)) throw error;
              granted = undefined;
            }
            if (granted) {
              if (signal?.aborted) {
                // aborted while the grant was on its way: give it back
                await granted.release().catch(() => undefined);
                throw abortedError(key, signal.reason);
              }
              return this.#lease(key, mode, core, localMode, granted, started);
            }
            await emitWaiting();
            const left =
              timeoutMs === undefined ? Infinity : timeoutMs - (this.#clock.now() - started);
            if (left <= 0) {
              throw timeoutError(
                key,
                timeoutMs ?? 0,
                await this.#backend.holder(key, id).catch(() => undefined),
              );
            }
            if (woken) continue;
            if (this.#backend.beginWait && !endWait) {
              // announce the wait, then try again at once: a release between our try and the
              // announcement sent no notification
              endWait = await this.#backend.beginWait(id).catch(() => undefined);
              if (endWait) continue;
            }
            const pause = Math.min(
              left,
              unsubscribe ? this.#fallbackPoll : this.#pollDelay(++retry),
            );
            await new Promise<void>((resolve, reject) => {
              const done = () => {
                cancelTimer();
                signal?.removeEventListener('abort', onAbort);
                wake = undefined;
              };
              const cancelTimer = after(this.#clock, pause, () => {
                done();
                resolve();
              });
              const onAbort = () => {
                done();
                reject(abortedError(key, signal?.reason));
              };
              wake = () => {
                done();
                resolve();
              };
              signal?.addEventListener('abort', onAbort, { once: true });
            });
          } finally {
            unsubscribe?.();
          }
        }
      } finally {
        if (endWait) await endWait();
      }
    } catch (error) {
      core.release(localMode);
      throw error;
    }
  }

  async tryAcquire(key: string, options: { mode?: LockMode } = {}): Promise<Lease | undefined> {
    const { mode } = validateRequest(this.#owner, key, options);
    const localMode = this.#backend.localMode(mode);
    const core = this.#locks.tryAcquire(key, localMode);
    if (!core) return undefined;
    try {
      await this.ready();
      const granted = await this.#backend.tryGrant(key, lockId(key), mode, false);
      if (!granted) {
        core.release(localMode);
        return undefined;
      }
      return this.#lease(key, mode, core, localMode, granted, this.#clock.now());
    } catch (error) {
      core.release(localMode);
      throw error;
    }
  }

  async holder(key: string): Promise<LockHolder | undefined> {
    validateKey(key);
    await this.ready();
    return this.#backend.holder(key, lockId(key));
  }

  /** Stops heartbeats and closes the backend's connection (held leases are then lost). */
  close(): Promise<void> {
    return this.#backend.close();
  }

  #lease(
    key: string,
    mode: LockMode,
    core: RwCore,
    localMode: LockMode,
    granted: Granted,
    started: number,
  ): Lease {
    let localReleased = false;
    const releaseLocal = () => {
      if (localReleased) return;
      localReleased = true;
      core.release(localMode);
    };
    const lease = new LeaseImpl({
      key,
      mode,
      token: granted.token,
      provider: this.name,
      events: this.events,
      clock: this.#clock,
      onRelease: async () => {
        unwatch();
        try {
          await granted.release();
        } finally {
          releaseLocal();
        }
      },
    });
    const onLost = () => {
      lease.markLost(this.lostReason, granted.lost.reason);
      // the lock is gone server-side: let local waiters try again
      releaseLocal();
    };
    const unwatch = granted.lost.aborted ? (onLost(), noop) : this.#watch(granted.lost, onLost);
    emitAcquired(this.events, this.name, lease, started);
    return lease;
  }

  /**
   * Calls `fn` when `signal` aborts; returns the function that stops watching. One listener per
   * signal however many leases watch it (session backends share one signal across all grants, and
   * EventTarget listeners cost more than a Set entry per grant).
   */
  #watch(signal: AbortSignal, fn: () => void): () => void {
    let set = this.#watchers.get(signal);
    if (!set) {
      const created = new Set<() => void>();
      this.#watchers.set(signal, (set = created));
      signal.addEventListener(
        'abort',
        () => {
          this.#watchers.delete(signal);
          for (const f of [...created]) f();
        },
        { once: true },
      );
    }
    const s = set;
    s.add(fn);
    return () => s.delete(fn);
  }
}
