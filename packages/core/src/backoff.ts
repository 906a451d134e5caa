import { nonNegativeOption, positiveOption } from './options.js';

/** Exponential backoff settings. */
export interface BackoffSettings {
  /** Delay before the first retry, in ms. @default 100 */
  initialMs?: number | undefined;
  /** Multiplier per retry (>= 1). @default 2 */
  factor?: number | undefined;
  /** Upper bound of any delay, in ms. @default 30000 */
  maxMs?: number | undefined;
  /** Random spread as a fraction of the delay, 0..1 (0 disables). @default 0 */
  jitter?: number | undefined;
}

/**
 * Delay before retry `n` (from 1): a fixed number of ms, a function of the retry number, or
 * exponential settings. Every package that retries takes this one type.
 */
export type Backoff = number | ((retry: number) => number) | BackoffSettings;

/**
 * Validates `backoff` once and returns the function giving the delay (ms, >= 0) before retry `n`
 * (from 1). `owner` names the option's owner in the `TypeError` a bad value throws.
 * @example const delay = backoffDelay('Queue', { initialMs: 50 }); delay(3) // 200
 */
export function backoffDelay(
  owner: string,
  backoff: Backoff | undefined,
  random: () => number = Math.random,
): (retry: number) => number {
  if (backoff === undefined) return () => 0;
  if (typeof backoff === 'number') {
    const ms = nonNegativeOption(owner, 'backoff', backoff, 0);
    return () => ms;
  }
  if (typeof backoff === 'function') {
    return (retry) => {
      const ms = backoff(retry);
      return Number.isFinite(ms) && ms > 0 ? ms : 0;
    };
  }
  if (typeof backoff !== 'object' || backoff === null) {
    throw new TypeError(
      `${owner}: backoff must be a number, a function or { initialMs, factor, maxMs, jitter }, got ${String(backoff)}`,
    );
  }
  const initial = nonNegativeOption(owner, 'backoff.initialMs', backoff.initialMs, 100);
  const factor = positiveOption(owner, 'backoff.factor', backoff.factor, 2);
  if (factor < 1) throw new TypeError(`${owner}: backoff.factor must be >= 1, got ${factor}`);
  const max = nonNegativeOption(owner, 'backoff.maxMs', backoff.maxMs, 30_000);
  const jitter = nonNegativeOption(owner, 'backoff.jitter', backoff.jitter, 0);
  if (jitter > 1) throw new TypeError(`${owner}: backoff.jitter must be <= 1, got ${jitter}`);
  return (retry) => {
    const base = Math.min(max, initial * factor ** Math.max(0, retry - 1));
    if (jitter === 0) return base;
    return Math.max(0, Math.min(max, base * (1 - jitter + 2 * jitter * random())));
  };
}
