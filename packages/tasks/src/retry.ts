import type { JsonObject } from '@rigging/core';

/** What to do after a task attempt failed. */
export type RetryDecision =
  | { action: 'retry'; delayMs?: number; params?: JsonObject }
  /** Give up on this task: the flow reverts (the default without a controller). */
  | { action: 'revert' }
  /** Give up and revert the whole flow, whatever enclosing flows would otherwise decide. */
  | { action: 'revertAll' };

/** Facts a controller decides on. */
export interface RetryContext {
  task: string;
  /** The attempt that just failed, from 1. */
  attempt: number;
  error: unknown;
}

/** Decides whether a failed task is retried. Controllers are stateless: the attempt number comes from the log. */
export interface RetryController {
  readonly kind: 'times' | 'alternatives' | 'revertAll' | (string & {});
  /** Parameters merged into the inputs of attempt `attempt` (from 1). */
  paramsFor?(attempt: number): JsonObject | undefined;
  onFailure(context: RetryContext): RetryDecision;
}

/** Delay before retry `n` (from 1): a fixed number of ms, a function, or exponential settings. */
export type Backoff =
  | number
  | ((retry: number) => number)
  | {
      /** @default 100 */
      initialMs?: number;
      /** @default 2 */
      factor?: number;
      /** @default 30000 */
      maxMs?: number;
    };

function delayOf(backoff: Backoff | undefined, retry: number): number {
  if (backoff === undefined) return 0;
  if (typeof backoff === 'number') return backoff;
  if (typeof backoff === 'function') return Math.max(0, backoff(retry));
  const initial = backoff.initialMs ?? 100;
  const factor = backoff.factor ?? 2;
  const max = backoff.maxMs ?? 30_000;
  return Math.min(max, initial * factor ** (retry - 1));
}

/** Retries a failed task up to `n` more times, waiting `backoff` between attempts, then reverts. */
export function times(n: number, backoff?: Backoff): RetryController {
  if (!Number.isInteger(n) || n < 0) {
    throw new TypeError(`times(n): n must be a non-negative integer, got ${String(n)}`);
  }
  if (typeof backoff === 'number' && !(backoff >= 0)) {
    throw new TypeError(`times(n, backoff): backoff must be >= 0 ms, got ${String(backoff)}`);
  }
  return {
    kind: 'times',
    onFailure: ({ attempt }) =>
      attempt <= n ? { action: 'retry', delayMs: delayOf(backoff, attempt) } : { action: 'revert' },
  };
}

/**
 * Tries the task with each parameter set in turn (merged into its inputs, also visible as
 * `ctx.params`); reverts once every set failed.
 */
export function alternatives(
  paramSets: readonly JsonObject[],
  options: { backoff?: Backoff } = {},
): RetryController {
  if (!Array.isArray(paramSets) || paramSets.length === 0) {
    throw new TypeError('alternatives(paramSets): give at least one parameter set');
  }
  const sets = [...paramSets];
  return {
    kind: 'alternatives',
    paramsFor: (attempt) => sets[attempt - 1],
    onFailure: ({ attempt }) =>
      attempt < sets.length
        ? { action: 'retry', delayMs: delayOf(options.backoff, attempt), params: sets[attempt]! }
        : { action: 'revert' },
  };
}

/** Never retries; a failure reverts the whole flow, including every enclosing flow. */
export const revertAll: RetryController = Object.freeze({
  kind: 'revertAll',
  onFailure: () => ({ action: 'revertAll' }) as const,
});
