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
