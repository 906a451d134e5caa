// Where a FileLock's fencing tokens come from besides the lock file's counter.

/**
 * The highest fencing token one {@link FileLock} has granted, any key. A lock file's counter
 * orders the grants of its key; this source adds what the file cannot: a key whose lock file was
 * replaced (its counter lost) still gets a token above every earlier grant of this `FileLock`,
 * even within the same millisecond. Owned by the `FileLock` (one per lock directory instance) and
 * passed to the record functions that take tokens.
 * @internal
 */
export class TokenSource {
  #last = 0n;

  /** The lowest token the next grant may take: one above the last one granted. */
  get floor(): bigint {
    return this.#last + 1n;
  }

  /** Records `token` as granted; returns it. */
  issued(token: bigint): bigint {
    if (token > this.#last) this.#last = token;
    return token;
  }

  /**
   * The token after `previous` (a lock file's counter), never below the clock in microseconds
   * (`now` in ms) nor below {@link TokenSource.floor}; recorded as granted.
   */
  next(previous: bigint, now: number): bigint {
    const clockFloor = BigInt(Math.floor(now)) * 1000n;
    let next = previous >= clockFloor ? previous + 1n : clockFloor;
    if (next < this.floor) next = this.floor;
    return this.issued(next);
  }
}
