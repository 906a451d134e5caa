import { positiveIntegerOption, systemClock, type Clock } from '@rigging/core';

/** Options of {@link FailureLimiter}. */
export interface FailureLimiterOptions {
  /** Failed sign-ins an address may make per window before it is refused. @default 20 */
  maxFailures?: number;
  /** Length of the window. @default 60000 */
  windowMs?: number;
  /** Addresses remembered at once (the oldest is forgotten first). @default 10000 */
  maxAddresses?: number;
  /** @default systemClock */
  clock?: Clock;
}

/**
 * Counts failed authentications per key (a client address, a presented token's prefix) in a
 * fixed window and says when a key has failed too often. Only failures are counted and only
 * failures are refused: a caller with a valid credential is never held back by it (the server
 * checks the credential first and consults the limiter only when it is wrong).
 */
export class FailureLimiter {
  readonly #max: number;
  readonly #windowMs: number;
  readonly #maxAddresses: number;
  readonly #clock: Clock;
  /** Address → failures in the window that started at `since` (insertion order = age). */
  readonly #failures = new Map<string, { since: number; count: number }>();

  constructor(options: FailureLimiterOptions = {}) {
    this.#max = positiveIntegerOption('FailureLimiter', 'maxFailures', options.maxFailures, 20);
    this.#windowMs = positiveIntegerOption('FailureLimiter', 'windowMs', options.windowMs, 60_000);
    this.#maxAddresses = positiveIntegerOption(
      'FailureLimiter',
      'maxAddresses',
      options.maxAddresses,
      10_000,
    );
    this.#clock = options.clock ?? systemClock;
  }

  /** Milliseconds until the failures of `address` (any key) stop being refused, or 0. */
  blockedFor(address: string): number {
    const entry = this.#current(address);
    if (!entry || entry.count < this.#max) return 0;
    return entry.since + this.#windowMs - this.#clock.now();
  }

  /** Records one failed authentication of `address`. */
  fail(address: string): void {
    const entry = this.#current(address);
    if (entry) {
      entry.count += 1;
      return;
    }
    if (this.#failures.size >= this.#maxAddresses) {
      const oldest = this.#failures.keys().next().value;
      if (oldest !== undefined) this.#failures.delete(oldest);
    }
    this.#failures.set(address, { since: this.#clock.now(), count: 1 });
  }

  #current(address: string): { since: number; count: number } | undefined {
    const entry = this.#failures.get(address);
    if (entry && this.#clock.now() - entry.since >= this.#windowMs) {
      this.#failures.delete(address);
      return undefined;
    }
    return entry;
  }
}
