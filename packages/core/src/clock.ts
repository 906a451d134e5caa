import { sleep } from './abort.js';

/** Time as the libraries see it; inject a {@link ManualClock} in tests. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`; rejects with `signal.reason` when aborted. */
  sleep(ms: number, options?: { signal?: AbortSignal | undefined }): Promise<void>;
}

/** The real clock: `Date.now()` and timers. */
export const systemClock: Clock = Object.freeze({
  now: () => Date.now(),
  sleep: (ms: number, options?: { signal?: AbortSignal | undefined }) => sleep(ms, options),
});

interface Sleeper {
  due: number;
  seq: number;
  resolve: () => void;
}

/**
 * A clock that only moves when told. `sleep` resolves when {@link ManualClock.advance} moves
 * time past its deadline, in deadline order, letting pending promise callbacks run between
 * wake-ups so that code reacting to one timer can schedule the next.
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  #sleepers: Sleeper[] = [];

  constructor(start = 0) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  /** Number of sleeps waiting for time to move. */
  get pendingSleeps(): number {
    return this.#sleepers.length;
  }

  sleep(ms: number, options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!(ms > 0)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const sleeper: Sleeper = {
        due: this.#now + ms,
        seq: this.#seq++,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#sleepers.push(sleeper);
    });
  }

  /** Moves time forward by `ms`, waking every sleep that falls due, in order. */
  async advance(ms: number): Promise<void> {
    if (!(ms >= 0)) throw new TypeError(`advance(ms): ms must be >= 0, got ${String(ms)}`);
    const target = this.#now + ms;
    for (;;) {
      await flushMicrotasks();
      const next = this.#earliest();
      if (!next || next.due > target) break;
      this.#sleepers = this.#sleepers.filter((s) => s !== next);
      this.#now = Math.max(this.#now, next.due);
      next.resolve();
    }
    this.#now = target;
    await flushMicrotasks();
  }

  /** Moves time to the next pending deadline (if any) and wakes it. */
  async runNext(): Promise<boolean> {
    await flushMicrotasks();
    const next = this.#earliest();
    if (!next) return false;
    await this.advance(Math.max(0, next.due - this.#now));
    return true;
  }

  #earliest(): Sleeper | undefined {
    let best: Sleeper | undefined;
    for (const s of this.#sleepers) {
      if (!best || s.due < best.due || (s.due === best.due && s.seq < best.seq)) best = s;
    }
    return best;
  }
}

/** A {@link ManualClock} starting at `start` (default 0). */
export function manualClock(start = 0): ManualClock {
  return new ManualClock(start);
}

async function flushMicrotasks(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
  await new Promise<void>((resolve) => setImmediate(resolve));
}
