// A worker's wake-ups from other processes, deferred while it has ops in flight: every worker of
// a queue hears each enqueue to an idle key and only one can take the op, and a busy worker's
// completions chain claims of their own.
import type { Clock } from '@rigging/core';

/**
 * How long a worker with ops in flight waits, after another process says there may be new work,
 * before it claims (unless a claim of its own sent meanwhile looked already). @internal
 */
export const WAKE_DEFER_MS = 30;

/**
 * The wake-ups one worker heard, numbered, and the one it deferred, if any: `ring` (the worker's
 * bell) is rung after {@link WAKE_DEFER_MS} unless a claim sent after the latest wake-up looked
 * first ({@link answered}). @internal
 */
export class DeferredWake {
  /** Wake-ups heard so far: a claim sent now looks for the work of all of them. */
  heard = 0;
  #pending: { serial: number; cancel: AbortController } | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly ring: () => void,
  ) {}

  /** Whether a wake-up waits for a claim. */
  get pending(): boolean {
    return this.#pending !== undefined;
  }

  /** A wake-up: the bell at once unless `busy`, else after the deferral (one timer for all). */
  hear(busy: boolean): void {
    const serial = ++this.heard;
    if (!busy) return this.ring();
    if (this.#pending) {
      this.#pending.serial = serial;
      return;
    }
    const cancel = new AbortController();
    this.#pending = { serial, cancel };
    this.clock.sleep(WAKE_DEFER_MS, { signal: cancel.signal }).then(
      () => {
        this.#pending = undefined;
        this.ring();
      },
      () => {},
    );
  }

  /** A claim sent when `heard` was `sentAfter` looked: it answers the wake-ups up to there. */
  answered(sentAfter = this.heard): void {
    if (this.#pending && sentAfter >= this.#pending.serial) this.cancel();
  }

  /** Nothing is deferred any more (closing, or the bell is rung now by the caller). */
  cancel(): void {
    this.#pending?.cancel.abort();
    this.#pending = undefined;
  }
}
