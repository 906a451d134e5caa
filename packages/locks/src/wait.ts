import { systemClock, type Clock, type LockHolder } from '@rigging/core';
import { abortedError, timeoutError } from './common.js';
import { after, type Cancel } from './timers.js';

/** @internal What a queued waiter gets: call `grant` once it owns the lock. */
export interface Grant<T> {
  grant(value: T): void;
  /** Fails the wait (e.g. an I/O error while polling). */
  fail(error: unknown): void;
}

/** @internal What {@link waitInQueue} needs to know about a wait. */
export interface WaitSpec {
  key: string;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  /** Holder for the timeout message, where known. */
  holder?: () => LockHolder | undefined;
  /** The clock the timeout runs on. @default systemClock */
  clock?: Clock | undefined;
}

/**
 * Waits in a queue with timeout and abort. `enqueue` puts the waiter in its queue and returns the
 * function that takes it out again (called synchronously on timeout/abort, before rejecting, so
 * no waiter is left behind). Timer and abort listener are removed however the wait ends.
 * @internal
 */
export function waitInQueue<T>(
  spec: WaitSpec,
  enqueue: (waiter: Grant<T>) => () => void,
): Promise<T> {
  const { signal, timeoutMs, key } = spec;
  if (signal?.aborted) return Promise.reject(abortedError(key, signal.reason));
  return new Promise<T>((resolve, reject) => {
    let done = false;
    let cancelTimer: Cancel | undefined;
    const cleanup = () => {
      done = true;
      cancelTimer?.();
      signal?.removeEventListener('abort', onAbort);
    };
    const cancel = enqueue({
      grant(value) {
        if (done) return;
        cleanup();
        resolve(value);
      },
      fail(error) {
        if (done) return;
        cleanup();
        reject(error);
      },
    });
    function onAbort() {
      if (done) return;
      cleanup();
      cancel();
      reject(abortedError(key, signal?.reason));
    }
    if (done) return;
    if (timeoutMs !== undefined) {
      cancelTimer = after(spec.clock ?? systemClock, timeoutMs, () => {
        if (done) return;
        cleanup();
        cancel();
        reject(timeoutError(key, timeoutMs, spec.holder?.()));
      });
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
