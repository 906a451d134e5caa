// The interface between TwoLevelLock and the FileLock behind it.
import type { Lease, LockMode, LockProvider } from '@rigging/core';

/**
 * What {@link TwoLevelLock} needs of its file level besides `LockProvider`, so that an
 * uncontended two-level grant stays synchronous: the in-process level decides first, then one
 * non-blocking try at the file. Implemented by {@link FileLock}; not part of the public API.
 * @internal
 */
export interface FileLevel extends LockProvider {
  /**
   * Throws the `TypeError` for a key that cannot name a lock file, before anything queues (keys
   * the file level has state for were checked when that state was made).
   */
  checkKey(key: string): void;
  /**
   * One synchronous non-blocking attempt, for the waiter at the front of the in-process queue: a
   * lease, or `undefined` when the lock is taken or waiters of this process queue at the file
   * level. `started` is when the caller began waiting (for the `lock:acquired` event).
   */
  tryNow(key: string, mode: LockMode, started: number): Lease | undefined;
}
