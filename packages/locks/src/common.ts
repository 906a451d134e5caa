import { TypedEmitter, showValue, systemClock, timeoutOption } from '@rigging/core';
import type { Clock, Lease, LockHolder, LockMode } from '@rigging/core';

import { LocksError } from './errors.js';

/** Events every provider of this package emits (one payload object each). */
export interface LockEvents {
  /** A wait started because the lock was taken; `holder` says by whom, where the backend can tell. */
  'lock:waiting': {
    /** The `name` of the provider that emitted the event. */
    provider: string;
    /** The lock key. */
    key: string;
    /** `'shared'` or `'exclusive'`. */
    mode: LockMode;
    /** Who holds the lock (pid, host, since), or `undefined` where the backend cannot tell. */
    holder: LockHolder | undefined;
    /** Epoch ms at which the wait started. */
    since: number;
  };
  /** A lease was granted. */
  'lock:acquired': {
    /** The `name` of the provider that emitted the event. */
    provider: string;
    /** The lock key. */
    key: string;
    /** `'shared'` or `'exclusive'`. */
    mode: LockMode;
    /** The lease's fencing token. */
    token: bigint;
    /** Milliseconds spent waiting (0 when granted at once). */
    waitedMs: number;
  };
  /** A lease was released by its holder. */
  'lock:released': {
    /** The `name` of the provider that emitted the event. */
    provider: string;
    /** The lock key. */
    key: string;
    /** `'shared'` or `'exclusive'`. */
    mode: LockMode;
    /** The lease's fencing token. */
    token: bigint;
    /** Milliseconds the lease was held. */
    heldMs: number;
    /** True when the lease had been lost before: the release was a no-op. */
    afterLoss: boolean;
  };
  /** A held lease was lost (session gone, lease expired, lock file replaced); `lease.lost` aborted. */
  'lock:lost': {
    /** The `name` of the provider that emitted the event. */
    provider: string;
    /** The lock key. */
    key: string;
    /** `'shared'` or `'exclusive'`. */
    mode: LockMode;
    /** The lease's fencing token. */
    token: bigint;
    /** Milliseconds the lease was held. */
    heldMs: number;
    /** Why ownership was lost, in words. */
    reason: string;
  };
}

/** The emitter type providers accept as `events` and expose as `.events`. */
export type LockEmitter = TypedEmitter<LockEvents>;

/** @internal A fresh emitter of `lock:*` events. */
export function newEmitter(): LockEmitter {
  return new TypedEmitter<LockEvents>();
}

/** @internal The `mode` option (`exclusive` when omitted); a `TypeError` naming the value otherwise. */
export function validateMode(mode: unknown): LockMode {
  if (mode === undefined) return 'exclusive';
  if (mode !== 'shared' && mode !== 'exclusive') {
    throw new TypeError(`mode must be 'shared' or 'exclusive', got ${showValue(mode)}`);
  }
  return mode;
}

/** @internal A lock key: a non-empty string of at most 1024 characters without NUL; a `TypeError` otherwise. */
export function validateKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > 1024 || key.includes('\0')) {
    throw new TypeError(
      `lock key must be a non-empty string of at most 1024 characters without NUL, got ${showValue(key)}`,
    );
  }
  return key;
}

/**
 * A wait's `timeoutMs` (core's `timeoutOption`: a `TypeError` naming `owner` and the value);
 * `Infinity` is returned as `undefined` (no timer).
 * @internal
 */
export function validateTimeout(owner: string, timeoutMs: unknown): number | undefined {
  const ms = timeoutOption(owner, timeoutMs);
  return ms === Infinity ? undefined : ms;
}

/**
 * The validation every `acquire`/`tryAcquire` starts with, contended or not: the key, the mode
 * and the timeout, each a `TypeError` naming the value. Returns the mode (default `'exclusive'`)
 * and the timeout (`undefined`: wait forever).
 * @internal
 */
export function validateRequest(
  owner: string,
  key: unknown,
  options: { mode?: unknown; timeoutMs?: unknown } | undefined,
): { mode: LockMode; timeoutMs: number | undefined } {
  validateKey(key);
  return {
    mode: validateMode(options?.mode),
    timeoutMs: validateTimeout(owner, options?.timeoutMs),
  };
}

/** @internal A new `locks.timeout` error for `key`, naming the holder where known. */
export function timeoutError(key: string, timeoutMs: number, holder?: LockHolder): LocksError {
  return new LocksError(
    'locks.timeout',
    `timed out after ${timeoutMs} ms waiting for lock ${JSON.stringify(key)}${holder ? ` (${describeHolder(holder)})` : ''}`,
    {
      details: { key, timeoutMs },
    },
  );
}

/** @internal A new `locks.aborted` error for `key`, with the signal's reason as `cause`. */
export function abortedError(key: string, reason: unknown): LocksError {
  return new LocksError('locks.aborted', `wait for lock ${JSON.stringify(key)} was aborted`, {
    cause: reason,
    details: { key },
  });
}

/** @internal `locks.closed`: the provider was shut down by `close()`. */
export function closedError(owner: string): LocksError {
  return new LocksError('locks.closed', `${owner}: the provider was shut down by close()`);
}

/** "held exclusive by pid 4123 on host since 12:01:07". */
export function describeHolder(holder: LockHolder): string {
  const who = [
    holder.pid !== undefined ? `pid ${holder.pid}` : undefined,
    holder.host !== undefined ? `on ${holder.host}` : undefined,
    holder.owner !== undefined ? `owner ${holder.owner}` : undefined,
  ]
    .filter(Boolean)
    .join(' ');
  const count = holder.count !== undefined && holder.count > 1 ? ` (${holder.count} holders)` : '';
  const since = new Date(holder.since).toISOString().slice(11, 19);
  return `held ${holder.mode}${who ? ` by ${who}` : ''}${count} since ${since}`;
}

/** Options shared by every provider in this package. */
export interface ProviderBaseOptions {
  /** Emitter to publish `lock:*` events on (share one across providers for a single log). */
  events?: LockEmitter;
  /**
   * Where time comes from: lease ages, TTLs, timeouts, retry delays, fencing-token floors,
   * `holder().since`. Tests pass core's `manualClock()`. @default systemClock
   */
  clock?: Clock;
}

/** @internal The `clock` option: core's `Clock` (`now` and `sleep`), `systemClock` when omitted. */
export function validateClock(owner: string, clock: unknown): Clock {
  if (clock === undefined) return systemClock;
  const c = clock as Partial<Clock> | null;
  if (
    typeof c !== 'object' ||
    c === null ||
    typeof c.now !== 'function' ||
    typeof c.sleep !== 'function'
  ) {
    throw new TypeError(
      `${owner}: clock must be a Clock ({ now, sleep }), got ${showValue(clock)}`,
    );
  }
  return clock as Clock;
}

const RESOLVED = Promise.resolve();

/** @internal A lease, as handed out by every provider of this package. */
export class LeaseImpl implements Lease {
  readonly key: string;
  readonly mode: LockMode;
  readonly token: bigint;
  readonly acquiredAt: number;
  #controller: AbortController | undefined;
  #released = false;
  #releasing: Promise<void> | undefined;
  #onRelease: (lease: LeaseImpl) => void | Promise<void>;
  #provider: string;
  #events: LockEmitter;
  #clock: Clock;
  #lossWatchers: Set<() => void> | undefined;

  constructor(init: {
    key: string;
    mode: LockMode;
    token: bigint;
    provider: string;
    events: LockEmitter;
    clock: Clock;
    onRelease: (lease: LeaseImpl) => void | Promise<void>;
    acquiredAt?: number;
  }) {
    this.key = init.key;
    this.mode = init.mode;
    this.token = init.token;
    this.#clock = init.clock;
    this.acquiredAt = init.acquiredAt ?? init.clock.now();
    this.#provider = init.provider;
    this.#events = init.events;
    this.#onRelease = init.onRelease;
  }

  get lost(): AbortSignal {
    // created on first use: most leases are released without anyone looking
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** True once lost. */
  get isLost(): boolean {
    return this.#controller?.signal.aborted === true;
  }

  /** True once released or lost. */
  get settled(): boolean {
    return this.#released || this.isLost;
  }

  get released(): boolean {
    return this.#released;
  }

  /**
   * Calls `fn` when the lease is lost, without creating its `lost` signal (wrappers use it on
   * every grant); returns the function that stops watching.
   */
  watchLoss(fn: () => void): () => void {
    (this.#lossWatchers ??= new Set()).add(fn);
    return () => this.#lossWatchers?.delete(fn);
  }

  /** Marks the lease lost (aborts `lost` with a `locks.lost` error) and emits `lock:lost`. */
  markLost(reason: string, cause?: unknown): void {
    if (this.#released || this.isLost) return;
    this.#controller ??= new AbortController();
    this.#controller.abort(
      new LocksError('locks.lost', `lock ${JSON.stringify(this.key)} was lost: ${reason}`, {
        cause,
        details: { key: this.key, token: this.token.toString(), reason },
      }),
    );
    if (this.#lossWatchers) for (const fn of [...this.#lossWatchers]) fn();
    if (this.#events.hasListeners('lock:lost')) {
      this.#events.emit('lock:lost', {
        provider: this.#provider,
        key: this.key,
        mode: this.mode,
        token: this.token,
        heldMs: this.#clock.now() - this.acquiredAt,
        reason,
      });
    }
  }

  release(): Promise<void> {
    return this.releaseNow() ?? RESOLVED;
  }

  /**
   * Releases; returns `undefined` when the release completed synchronously (wrappers use it to
   * skip a promise per grant), else the promise `release()` returns.
   */
  releaseNow(): Promise<void> | undefined {
    if (this.#releasing) return this.#releasing === RESOLVED ? undefined : this.#releasing;
    const afterLoss = this.isLost;
    this.#released = true;
    let result: void | Promise<void>;
    try {
      result = this.#onRelease(this);
    } catch (error) {
      result = Promise.reject(error);
    }
    if (result instanceof Promise) {
      this.#releasing = result.then(() => this.#emitReleased(afterLoss));
      return this.#releasing;
    }
    this.#emitReleased(afterLoss);
    this.#releasing = RESOLVED;
    return undefined;
  }

  #emitReleased(afterLoss: boolean): void {
    if (this.#events.hasListeners('lock:released')) {
      this.#events.emit('lock:released', {
        provider: this.#provider,
        key: this.key,
        mode: this.mode,
        token: this.token,
        heldMs: this.#clock.now() - this.acquiredAt,
        afterLoss,
      });
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/** @internal Emits `lock:acquired` for a new lease (only when someone listens). */
export function emitAcquired(
  events: LockEmitter,
  provider: string,
  lease: LeaseImpl,
  startedAt: number,
): void {
  if (events.hasListeners('lock:acquired')) {
    events.emit('lock:acquired', {
      provider,
      key: lease.key,
      mode: lease.mode,
      token: lease.token,
      waitedMs: lease.acquiredAt - startedAt,
    });
  }
}
