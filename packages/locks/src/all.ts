import type { AcquireOptions, Clock, Lease, LockMode, LockProvider } from '@rigging/core';
import {
  abortedError,
  validateClock,
  validateKey,
  validateMode,
  validateTimeout,
} from './common.js';
import { LocksError } from './errors.js';

/** A key for {@link acquireAll}: a string (taken in the call's `mode`) or a key with its own mode. */
export type KeySpec =
  | string
  | {
      /** The lock key. */
      key: string;
      /** The mode for this key. @default the `mode` option of {@link acquireAll} (itself `'exclusive'`) */
      mode?: LockMode;
    };

/** The leases taken by {@link acquireAll}, released together. */
export interface MultiLease extends AsyncDisposable {
  /** One lease per distinct key, in acquisition (sorted) order. */
  readonly leases: readonly Lease[];
  /** Aborts as soon as any of the leases is lost. */
  readonly lost: AbortSignal;
  /** The lease of `key`. */
  get(key: string): Lease | undefined;
  /** Releases every lease (in reverse order). Idempotent. */
  release(): Promise<void>;
}

/**
 * Acquires several keys in one global order (sorted by code unit, duplicates merged with the
 * stronger mode), so two callers never deadlock by taking the same keys in different orders.
 * `timeoutMs` bounds the whole call. On any failure every lease already taken is released and
 * the error is rethrown.
 */
export async function acquireAll(
  provider: LockProvider,
  keys: Iterable<KeySpec>,
  options: Omit<AcquireOptions, 'mode'> & {
    mode?: LockMode;
    /** The clock `timeoutMs` is measured on. @default systemClock */
    clock?: Clock;
  } = {},
): Promise<MultiLease> {
  const clock = validateClock('acquireAll', options.clock);
  const timeoutMs = validateTimeout('acquireAll', options.timeoutMs);
  const defaultMode = validateMode(options.mode);
  const wanted = new Map<string, LockMode>();
  for (const spec of keys) {
    const key = validateKey(typeof spec === 'string' ? spec : spec?.key);
    const mode = typeof spec === 'string' ? defaultMode : validateMode(spec.mode ?? defaultMode);
    if (wanted.get(key) !== 'exclusive') wanted.set(key, mode);
  }
  const sorted = [...wanted.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const started = clock.now();
  const leases: Lease[] = [];
  try {
    for (const key of sorted) {
      if (options.signal?.aborted) throw abortedError(key, options.signal.reason);
      const remaining =
        timeoutMs === undefined ? undefined : Math.max(0, timeoutMs - (clock.now() - started));
      leases.push(
        await provider.acquire(key, {
          mode: wanted.get(key) ?? 'exclusive',
          timeoutMs: remaining,
          signal: options.signal,
        }),
      );
    }
  } catch (error) {
    await releaseAll(leases);
    throw error;
  }
  const lost = AbortSignal.any(leases.map((l) => l.lost));
  let releasing: Promise<void> | undefined;
  const multi: MultiLease = {
    leases,
    lost,
    get: (key) => leases.find((l) => l.key === key),
    release: () => (releasing ??= releaseAll(leases)),
    [Symbol.asyncDispose]: () => multi.release(),
  };
  return multi;
}

async function releaseAll(leases: readonly Lease[]): Promise<void> {
  const errors: unknown[] = [];
  for (const lease of [...leases].reverse()) {
    try {
      await lease.release();
    } catch (error) {
      errors.push(error);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, 'releasing several leases failed');
}

/**
 * Throws a `locks.lost` RiggingError when `lease` has been lost (its `lost` signal aborted), so a
 * holder stops before a write it no longer owns. Call it right before each protected write.
 */
export function assertHeld(lease: Lease): void {
  if (lease.lost.aborted) {
    const reason: unknown = lease.lost.reason;
    if (LocksError.hasCode(reason, 'locks.lost')) throw reason;
    throw new LocksError('locks.lost', `lock ${JSON.stringify(lease.key)} was lost`, {
      cause: reason,
      details: { key: lease.key, token: lease.token.toString() },
    });
  }
}

/**
 * The resource side of fencing: remembers the highest token seen per resource and refuses an
 * older one with `locks.stale`. Keep one per resource store (in a database, store the token
 * with the data and compare in the same transaction instead).
 */
export class FencingGuard {
  #highest = new Map<string, bigint>();

  /** Accepts `token` for `resource` if it is not older than any seen; throws `locks.stale` otherwise. */
  check(resource: string, token: bigint): void {
    const seen = this.#highest.get(resource);
    if (seen !== undefined && token < seen) {
      throw new LocksError(
        'locks.stale',
        `stale fencing token ${token} for ${JSON.stringify(resource)}: ${seen} was already used`,
        { details: { resource, token: token.toString(), highest: seen.toString() } },
      );
    }
    this.#highest.set(resource, token);
  }

  /** Highest token accepted for `resource`. */
  highest(resource: string): bigint | undefined {
    return this.#highest.get(resource);
  }
}
