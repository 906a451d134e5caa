// Successes recorded in batches, like a database's group commit.
import type { Claim, Completion } from '../backend.js';
import type { ChainOptions } from './dialects/dialect.js';

/** Successes recorded together at most (one statement or transaction). */
const SUCCEED_BATCH = 64;
/** Batches of successes being recorded at once by one backend instance. */
const MAX_SUCCEED_BATCHES = 2;

/** A success waiting to be recorded with others that arrive meanwhile. @internal */
export interface SucceedItem {
  claim: Claim;
  result: unknown;
  /** `result` as stored (JSON). */
  text: string;
  /** Claim the next op along with this success (it takes over the slot). */
  next: ChainOptions | undefined;
  resolve: (c: Completion | undefined) => void;
  reject: (error: unknown) => void;
}

/** The completion of an accepted success. @internal */
export const succeeded = (it: SucceedItem, at: number): Completion => ({
  op: { ...it.claim.op, status: 'succeeded' as const, result: it.result, finishedAt: at },
  cancelled: [],
  blocked: false,
});

/**
 * Hands the ops claimed for a batch to the accepted successes that asked for one (at most one
 * each: it takes over that op's slot); poisoned completions go with the first. @internal
 */
export function handOut(
  out: (Completion | undefined)[],
  items: SucceedItem[],
  chained: { claims: Claim[]; poisoned: Completion[] } | undefined,
): (Completion | undefined)[] {
  if (!chained) return out;
  let i = 0;
  let poisoned = chained.poisoned;
  for (let j = 0; j < items.length; j++) {
    const c = out[j];
    if (!c || !items[j]!.next) continue;
    const claim = chained.claims[i++];
    c.next = { claims: claim ? [claim] : [], poisoned };
    poisoned = [];
  }
  return out;
}

/**
 * Successes that arrive in the same turn of the event loop (handlers that finished together),
 * or while earlier batches are being recorded, go together in one statement (PostgreSQL) or
 * transaction: one commit for many ops. The first waits for no timer, only for the end of the
 * current turn. @internal
 */
export class SucceedBatcher {
  readonly #waiting: SucceedItem[] = [];
  #batches = 0;
  #scheduled = false;

  constructor(
    /** Records one batch; results in the order of `items`. */
    private readonly record: (items: SucceedItem[]) => Promise<(Completion | undefined)[]>,
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
      const items = this.#waiting.splice(0, SUCCEED_BATCH);
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
