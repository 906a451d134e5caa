import { showValue } from './show.js';

/** Lock modes: many shared holders at once, or one exclusive holder. */
export type LockMode = 'shared' | 'exclusive';

/** A granted lock. Release it once done (`await using lease = await provider.acquire(key)`). */
export interface Lease extends AsyncDisposable {
  /** The key the lock was granted for. */
  readonly key: string;
  /** The mode it was granted in. */
  readonly mode: LockMode;
  /**
   * Fencing token: strictly increasing per key across grants, so a resource can refuse writes
   * from a holder whose lease was lost and since re-granted.
   */
  readonly token: bigint;
  /** Aborts when ownership is lost (session gone, lease expired, lock file replaced). */
  readonly lost: AbortSignal;
  /** Releases the lock. Idempotent; a no-op after loss. */
  release(): Promise<void>;
}

/** Options for {@link LockProvider.acquire}. */
export interface AcquireOptions {
  /** @default 'exclusive' */
  mode?: LockMode;
  /** Give up after this long (rejects with `locks.timeout`). Waits forever when omitted. */
  timeoutMs?: number;
  /** Abort the wait (rejects with `locks.aborted`, cause = `signal.reason`). */
  signal?: AbortSignal;
}

/** Who holds a lock, where the backend can tell. */
export interface LockHolder {
  /** The mode the lock is held in. */
  readonly mode: LockMode;
  /** Epoch milliseconds at which the current holder acquired. */
  readonly since: number;
  /** Process id of the holder, where the backend records it (file locks, SQL lease tables). */
  readonly pid?: number;
  /** Host name of the holder, where the backend records it. */
  readonly host?: string;
  /** Backend-specific owner identity (session id, worker name, …). */
  readonly owner?: string;
  /** Number of holders (shared mode). */
  readonly count?: number;
}

/** The lock contract every level implements (in-process, file, SQL, Redis). */
export interface LockProvider {
  /**
   * Waits until `key` can be granted in `options.mode` and returns the lease. Rejects with
   * `locks.timeout` after `timeoutMs`, with `locks.aborted` when `signal` aborts; invalid
   * options throw a `TypeError` before anything waits.
   */
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
  /** Acquires without waiting; `undefined` when the lock is taken. */
  tryAcquire(key: string, options?: { mode?: LockMode }): Promise<Lease | undefined>;
  /** Who holds `key` now, where the backend can tell; `undefined` when free or unknown. */
  holder?(key: string): Promise<LockHolder | undefined>;
}

/** The largest fencing token: tokens are stored in 64-bit signed SQL columns (`bigint`). */
const MAX_TOKEN = (1n << 63n) - 1n;

/**
 * The JSON form of a fencing token ({@link Lease.token}): its decimal digits as a string
 * (`12n` → `"12"`), since JSON has no bigint and a number loses precision above 2^53. Use it to
 * carry a token through task inputs, queue payloads or HTTP bodies, and
 * {@link fencingTokenFromJson} to read it back.
 * @throws TypeError when `token` is not a bigint between 0 and 2^63 − 1.
 */
export function fencingTokenToJson(token: bigint): string {
  if (typeof token !== 'bigint' || token < 0n || token > MAX_TOKEN) {
    throw new TypeError(
      `fencingTokenToJson: token must be a bigint between 0 and 2^63 - 1, got ${showValue(token)}`,
    );
  }
  return token.toString();
}

/**
 * Reads a fencing token written by {@link fencingTokenToJson}: a string of decimal digits with no
 * sign, no leading zero and no spaces, at most 2^63 − 1.
 * @throws TypeError naming the value for anything else (a number, `"1e3"`, `"-1"`, `" 7"`, …), so
 *   a malformed token never reaches a fenced write.
 */
export function fencingTokenFromJson(value: unknown): bigint {
  if (typeof value === 'string' && /^(?:0|[1-9][0-9]{0,18})$/.test(value)) {
    const token = BigInt(value);
    if (token <= MAX_TOKEN) return token;
  }
  throw new TypeError(
    `fencingTokenFromJson: a fencing token is a string of decimal digits up to 2^63 - 1, got ${showValue(value)}`,
  );
}
