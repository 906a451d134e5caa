/** @internal What {@link pump} runs: tasks to start, and what to do with their outcomes. */
export interface PumpLoop {
  /** The next item to start, or -1 when none can start now. */
  next(): number;
  /** Starts `item`; resolves (or returns) whether it succeeded. */
  start(item: number): boolean | Promise<boolean>;
  /** Sees each outcome before the next pick. */
  done(item: number, ok: boolean): void;
  /** When nothing runs: `true` restarts the loop, `false` ends it. */
  idle?(): Promise<boolean>;
  /** A `start` that threw or rejected: fatal, nothing new should start (`next` sees it). */
  fail(error: unknown): void;
  /**
   * Called before the loop waits for running items with nothing new to start: writes what was
   * held back for the next write (undefined when nothing was). A rejection goes to `fail`.
   */
  flush?(): Promise<void> | undefined;
}

/**
 * @internal Runs `loop.start(item)` for each item that `loop.next()` gives, at most `limit` at
 * once; `done` sees each outcome before the next pick. When nothing runs, `idle()` may restart
 * the loop (`true`) or end it. Before waiting with nothing new to start, `flush()` writes what
 * was held back (one at a time; the loop ends only once it settled). A throw or rejection of
 * `start` goes to `fail`.
 */
export async function pump(limit: number, loop: PumpLoop): Promise<void> {
  if (limit === 1) {
    // One at a time: a plain loop (no promise, closure or wake-up per task).
    for (;;) {
      const item = loop.next();
      if (item < 0) {
        if (loop.idle && (await loop.idle())) continue;
        return;
      }
      let ok: boolean;
      try {
        const started = loop.start(item);
        ok = typeof started === 'boolean' ? started : await started;
      } catch (error) {
        loop.fail(error);
        continue;
      }
      loop.done(item, ok);
    }
  }
  let running = 0;
  let flushing = false;
  let woken = false;
  let wake: (() => void) | undefined;
  const settle = () => {
    running--;
    woken = true;
    wake?.();
  };
  const flushed = () => {
    flushing = false;
    woken = true;
    wake?.();
  };
  for (;;) {
    while (running < limit) {
      const item = loop.next();
      if (item < 0) break;
      running++;
      let started: Promise<boolean>;
      try {
        const outcome = loop.start(item);
        started = typeof outcome === 'boolean' ? Promise.resolve(outcome) : outcome;
      } catch (error) {
        started = Promise.reject(error as Error);
      }
      started.then(
        (ok) => {
          loop.done(item, ok);
          settle();
        },
        (error: unknown) => {
          loop.fail(error);
          settle();
        },
      );
    }
    if (running === 0 && !flushing) {
      if (loop.idle && (await loop.idle())) continue;
      break;
    }
    if (!woken && !flushing) {
      const flush = loop.flush?.();
      if (flush) {
        flushing = true;
        flush.then(flushed, (error: unknown) => {
          loop.fail(error);
          flushed();
        });
      }
    }
    if (!woken) {
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
      wake = undefined;
    }
    woken = false;
  }
}
