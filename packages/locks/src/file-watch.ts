/** The timers a {@link FileLock} runs over the leases it holds. */
import { statSync } from 'node:fs';
import type { Clock } from '@rigging/core';
import { writeExclusiveSince } from './file-record.js';
import type { FileLease, KeyState } from './file-state.js';
import { after, every, type Cancel } from './timers.js';

/** An exclusive lease held this long gets its `since` written for `holder()`. */
const RECORD_SINCE_AFTER_MS = 50;

/**
 * Counts the held leases and, while there are any, writes `since` into the record of exclusive
 * leases held a while (for `holder()`; exclusive grants write none, to stay cheap) and checks
 * every `checkIntervalMs` that each lease's file still is the one it locked (else the lease is
 * lost). One timer of each kind for all leases, never one per grant.
 * @internal
 */
export class HeldLeases {
  #count = 0;
  #checker: Cancel | undefined;
  #sinceTimer: Cancel | undefined;
  readonly #clock: Clock;
  readonly #checkInterval: number;
  readonly #states: ReadonlyMap<string, KeyState>;

  /** `states`: the provider's keys, whose leases the timers visit. */
  constructor(clock: Clock, checkInterval: number, states: ReadonlyMap<string, KeyState>) {
    this.#clock = clock;
    this.#checkInterval = checkInterval;
    this.#states = states;
  }

  /** A lease was granted. */
  added(lease: FileLease): void {
    this.#count++;
    if (lease.mode === 'exclusive' && this.#sinceTimer === undefined) {
      this.#armSince(RECORD_SINCE_AFTER_MS);
    }
    if (this.#checkInterval > 0 && !this.#checker) {
      this.#checker = every(this.#clock, this.#checkInterval, () => this.#checkAll(), true);
    }
  }

  /** A lease was unlocked (the checker stops itself at its next tick when nothing is held). */
  removed(): void {
    this.#count--;
  }

  /** Stops both timers (held leases stay held). */
  stop(): void {
    this.#checker?.();
    this.#checker = undefined;
    this.#sinceTimer?.();
    this.#sinceTimer = undefined;
  }

  #armSince(ms: number): void {
    this.#sinceTimer = after(this.#clock, ms, () => this.#recordSince(), true);
  }

  /** Writes `since` of exclusive leases held RECORD_SINCE_AFTER_MS or longer (for holder()). */
  #recordSince(): void {
    this.#sinceTimer = undefined;
    if (this.#count === 0) return;
    const now = this.#clock.now();
    let next = Infinity;
    for (const state of this.#states.values()) {
      for (const lease of state.leases) {
        if (lease.mode !== 'exclusive' || lease.sinceWritten || lease.isLost) continue;
        const age = now - lease.acquiredAt;
        if (age < RECORD_SINCE_AFTER_MS) {
          next = Math.min(next, RECORD_SINCE_AFTER_MS - age);
          continue;
        }
        try {
          writeExclusiveSince(state, lease.held.fd, lease.acquiredAt);
          lease.sinceWritten = true;
        } catch {
          // diagnostic only: holder() then reports the time it is asked as `since`
        }
      }
    }
    if (next !== Infinity) this.#armSince(Math.max(1, next));
  }

  #checkAll(): void {
    if (this.#count === 0) {
      this.#checker?.();
      this.#checker = undefined;
      return;
    }
    for (const state of this.#states.values()) {
      for (const lease of state.leases) check(lease);
    }
  }
}

/** Marks `lease` lost when its path no longer names the file it locked. */
function check(lease: FileLease): void {
  if (lease.isLost) return;
  let ok: boolean;
  try {
    const st = statSync(lease.state.path);
    ok = st.ino === lease.held.ino && st.dev === lease.held.dev;
  } catch {
    ok = false; // gone, or its directory is
  }
  if (!ok) lease.markLost('lock file was removed or replaced');
}
