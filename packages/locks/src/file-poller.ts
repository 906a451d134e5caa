/**
 * The one poller per key per process: the waiters of this process queue behind it (FIFO) while it
 * retries non-blocking tries with bounded backoff, so a blocked lock never sits on libuv's
 * thread pool.
 */
import type { Clock } from '@rigging/core';
import type { WaitQueue } from './queue.js';
import { pause } from './timers.js';
import type { Grant } from './wait.js';

/** The per-key fields the poller reads and sets. @internal */
export interface PolledKey<W> {
  queue: WaitQueue<W>;
  /** True while a poller runs for the key. */
  polling: boolean;
  /** Ends the poller's current backoff at once (a release or a departed waiter). */
  wake: (() => void) | undefined;
}

/**
 * Grants `key`'s waiters in queue order until the queue is empty: `attempt` is one non-blocking
 * try for the front waiter (a throw fails that waiter alone); after a miss, waits `delay(retry)`
 * or until woken. Calls `done` once it stops.
 * @internal
 */
export async function pollKey<T, W extends { g: Grant<T> }>(
  key: PolledKey<W>,
  attempt: (waiter: W) => T | undefined,
  delay: (retry: number) => number,
  clock: Clock,
  done: () => void,
): Promise<void> {
  key.polling = true;
  let retry = 0;
  try {
    for (let node = key.queue.head; node; node = key.queue.head) {
      let held: T | undefined;
      try {
        held = attempt(node.value);
      } catch (error) {
        key.queue.remove(node);
        node.value.g.fail(error);
        continue;
      }
      if (held) {
        key.queue.remove(node);
        node.value.g.grant(held);
        retry = 0;
        continue;
      }
      const sleep = pause(clock, delay(++retry));
      key.wake = sleep.wake;
      await sleep.done;
      key.wake = undefined;
    }
  } finally {
    key.polling = false;
    done();
  }
}
