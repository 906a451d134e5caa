// Successes recorded in batches, like a database's group commit.
import type { Claim, Completion } from '../backend.js';
import type { ChainOptions, SucceedItem } from './types.js';

/** Successes recorded together at most (one statement or transaction). */
const SUCCEED_BATCH = 64;
/** Batches of successes being recorded at once by one backend instance. */
const MAX_SUCCEED_BATCHES = 2;
/**
 * Successes a batch takes at least when those waiting are shared among the free batches (unless
 * fewer wait): a few handlers that finish together make one statement, not several.
 */
const MIN_SHARED_BATCH = 4;

/**
 * Successes that arrive in the same turn of the event loop (handlers that finished together),
 * or while earlier batches are being recorded, go together in one statement (PostgreSQL) or
 * transaction: one commit for many ops. The first waits for no timer, only for the end of the
 * current turn. With `splitBatches` (the dialect's), those waiting are shared among the batches
 * that are free, so that two statements run at once on two connections (the database works on one
 * while this process handles the other's results), each still recording several successes.
 * @internal
 */
export class SucceedBatcher {
  readonly #waiting: SucceedItem[] = [];
  #batches = 0;
  #scheduled = false;

  constructor(
    /** Records one batch; results in the order of `items`. */
    private readonly record: (items: SucceedItem[]) => Promise<(Completion | undefined)[]>,
    private readonly options: { readonly splitBatches: boolean },
  ) {}

  /** Queues a success for the next batch; resolves with its completion (undefined: refused). */
  add(
    claim: Claim,
    result: unknown,
    next: ChainOptions | undefined,
  ): Promise<Completion | undefined> {
    return new Promise<Completion | undefined>((resolve, reject) => {
      const text = JSON.stringify(result ?? null);
      this.#waiting.push({ claim, result, text, next, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#flush());
  }

  #flush(): void {
    this.#scheduled = false;
    while (this.#batches < MAX_SUCCEED_BATCHES && this.#waiting.length > 0) {
      const free = this.options.splitBatches ? MAX_SUCCEED_BATCHES - this.#batches : 1;
      const share = Math.max(MIN_SHARED_BATCH, Math.ceil(this.#waiting.length / free));
      const items = this.#waiting.splice(0, Math.min(SUCCEED_BATCH, share));
      this.#batches++;
      void this.record(items)
        .then(
          (out) => items.forEach((it, i) => it.resolve(out[i])),
          (error: unknown) => items.forEach((it) => it.reject(error)),
        )
        .finally(() => {
          this.#batches--;
          if (this.#waiting.length > 0) this.#pump();
        });
    }
  }
}
