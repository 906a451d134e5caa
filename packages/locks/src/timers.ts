import { systemClock, type Clock } from '@rigging/core';

/** @internal Stops what {@link after} or {@link every} scheduled; safe to call twice. */
export type Cancel = () => void;

const noop = () => {};

/**
 * Calls `fn` once `ms` have passed on `clock`. The system clock gets a plain timer (`unref`'d when
 * asked, so background work never keeps a process alive); any other clock (a manual one in
 * tests) its `sleep`, so that time moves only when the test moves it.
 * @internal
 */
export function after(clock: Clock, ms: number, fn: () => void, unref = false): Cancel {
  if (clock === systemClock) {
    const timer = setTimeout(fn, ms);
    if (unref) timer.unref();
    return () => clearTimeout(timer);
  }
  const controller = new AbortController();
  let cancelled = false;
  clock.sleep(ms, { signal: controller.signal }).then(() => {
    if (!cancelled) fn();
  }, noop);
  return () => {
    cancelled = true;
    controller.abort();
  };
}

/** @internal Calls `fn` every `ms` on `clock` until cancelled (see {@link after}). */
export function every(clock: Clock, ms: number, fn: () => void, unref = false): Cancel {
  if (clock === systemClock) {
    const timer = setInterval(fn, ms);
    if (unref) timer.unref();
    return () => clearInterval(timer);
  }
  let stopped = false;
  let cancel = after(clock, ms, tick);
  function tick() {
    if (stopped) return;
    cancel = after(clock, ms, tick);
    fn();
  }
  return () => {
    stopped = true;
    cancel();
  };
}

/** @internal Resolves after `ms` on `clock`, or at once when `wake` is called (see {@link after}). */
export function pause(clock: Clock, ms: number): { done: Promise<void>; wake: () => void } {
  let wake = noop;
  const done = new Promise<void>((resolve) => {
    const cancel = after(clock, ms, resolve);
    wake = () => {
      cancel();
      resolve();
    };
  });
  return { done, wake };
}
