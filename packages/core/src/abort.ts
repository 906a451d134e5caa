/** Options every wait accepts. */
export interface WaitOptions {
  /** Aborts the wait; it then rejects with `signal.reason`. */
  signal?: AbortSignal | undefined;
  /** Gives up after this many milliseconds. */
  timeoutMs?: number | undefined;
}

/** Throws `signal.reason` if the signal is already aborted. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason;
}

/** Resolves after `ms` milliseconds; rejects with `signal.reason` if aborted first. */
export function sleep(
  ms: number,
  options: { signal?: AbortSignal | undefined } = {},
): Promise<void> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      },
      Math.max(0, ms),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A signal combining a caller's signal with a timeout; dispose it to remove every listener. */
export interface ScopedSignal extends Disposable {
  /** Aborts when the caller's signal aborts or the timeout elapses, whichever comes first. */
  readonly signal: AbortSignal;
  /** True when the scope aborted because of its timeout (not the caller's signal). */
  readonly timedOut: boolean;
  /** Clears the timer and the listener on the caller's signal. Idempotent. */
  dispose(): void;
}

/**
 * Combines `options.signal` with `options.timeoutMs` into one signal. On timeout the signal
 * aborts with `onTimeout()` (default: a `TimeoutError` DOMException, as `AbortSignal.timeout`).
 * Always call `dispose()` (or `using scope = scopedSignal(...)`): the timer and the listener on
 * the caller's signal are removed, so nothing leaks however many waits are made.
 */
export function scopedSignal(
  options: WaitOptions & { onTimeout?: () => unknown } = {},
): ScopedSignal {
  const controller = new AbortController();
  const parent = options.signal;
  let timedOut = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const onParentAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener('abort', onParentAbort, { once: true });
  const { timeoutMs } = options;
  if (timeoutMs !== undefined && !controller.signal.aborted) {
    if (!(timeoutMs >= 0)) throw new TypeError(`timeoutMs must be >= 0, got ${String(timeoutMs)}`);
    timer = setTimeout(() => {
      timedOut = true;
      controller.abort(
        options.onTimeout
          ? options.onTimeout()
          : new DOMException(`timed out after ${timeoutMs} ms`, 'TimeoutError'),
      );
    }, timeoutMs);
  }
  const dispose = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    parent?.removeEventListener('abort', onParentAbort);
  };
  return {
    signal: controller.signal,
    get timedOut() {
      return timedOut;
    },
    dispose,
    [Symbol.dispose]: dispose,
  };
}

/**
 * Races `promise` against `signal`: rejects with `signal.reason` when aborted first. The
 * promise itself is not cancelled (pass the signal to whatever produces it for that).
 */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** `Promise.withResolvers` for Node 20. */
export interface Deferred<T> {
  /** Settles when {@link Deferred.resolve} or {@link Deferred.reject} is called. */
  promise: Promise<T>;
  /** Resolves {@link Deferred.promise}. */
  resolve: (value: T | PromiseLike<T>) => void;
  /** Rejects {@link Deferred.promise}. */
  reject: (reason?: unknown) => void;
}

/** A promise with its `resolve` and `reject` functions (`Promise.withResolvers`). */
export function deferred<T>(): Deferred<T> {
  let resolve!: Deferred<T>['resolve'];
  let reject!: Deferred<T>['reject'];
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
