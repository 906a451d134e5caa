/** What a {@link FileLock} keeps per key and per grant. @internal */
import type { LockMode } from '@rigging/core';
import { LeaseImpl } from './common.js';
import type { TokenCache } from './file-record.js';
import type { PolledKey } from './file-poller.js';
import type { Grant } from './wait.js';

/** A granted lock: the descriptor holding it, the file's identity, the token. @internal */
export interface Held {
  fd: number;
  ino: number;
  dev: number;
  token: bigint;
}

/** A waiter of this process for a key. @internal */
export interface FileWaiter {
  mode: LockMode;
  g: Grant<Held>;
}

/** One key: its waiters, its leases and the descriptor kept for its next grant. @internal */
export interface KeyState extends PolledKey<FileWaiter> {
  key: string;
  path: string;
  cache: TokenCache | undefined;
  leases: Set<FileLease>;
  /**
   * Grants the poller handed to a waiter whose lease is not made yet (its wait resumes in a later
   * microtask): the key is not forgotten meanwhile.
   */
  granting: number;
  idleFd: number | undefined;
  idleIno: number;
  idleDev: number;
}

/** @internal */
export class FileLease extends LeaseImpl {
  held!: Held;
  state!: KeyState;
  /** Exclusive leases: `since` written into the record (held longer than RECORD_SINCE_AFTER_MS). */
  sinceWritten = false;
}
