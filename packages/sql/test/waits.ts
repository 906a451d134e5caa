// Test helper: how the timers of a retry loop ended, without measuring elapsed time.
import { vi } from 'vitest';

/**
 * Records the retry waits (timers of at least `minMs`) and how each ended: `cleared` before it
 * fired (woken by a signal) or `fired`. Proves why a wait ended without measuring elapsed time.
 */
export function watchWaits(minMs: number) {
  const waits: { ms: number; fired: boolean; cleared: boolean }[] = [];
  const ids = new Map<unknown, (typeof waits)[number]>();
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  const set = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((
    fn: (...args: unknown[]) => void,
    ms?: number,
    ...args: unknown[]
  ) => {
    const wait = { ms: ms ?? 0, fired: false, cleared: false };
    const id = realSet(() => {
      wait.fired = true;
      fn(...args);
    }, ms);
    if ((ms ?? 0) >= minMs) {
      waits.push(wait);
      ids.set(id, wait);
    }
    return id;
  }) as typeof setTimeout);
  const clear = vi.spyOn(globalThis, 'clearTimeout').mockImplementation(((id?: unknown) => {
    const wait = ids.get(id);
    if (wait && !wait.fired) wait.cleared = true;
    realClear(id as ReturnType<typeof setTimeout>);
  }) as typeof clearTimeout);
  return {
    waits,
    restore: () => {
      set.mockRestore();
      clear.mockRestore();
    },
  };
}
