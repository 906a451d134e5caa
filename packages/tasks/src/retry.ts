import { backoffDelay, nonNegativeIntegerOption } from '@rigging/core';
import type { Backoff, JsonObject } from '@rigging/core';

/** What to do after a task attempt failed. */
export type RetryDecision =
  | {
      /** Run the task again. */
      action: 'retry';
      /** Milliseconds to wait before the next attempt. @default 0 */
      delayMs?: number;
      /** The parameter set merged into the next attempt's inputs. */
      params?: JsonObject;
    }
  | {
      /** Give up on this task: the flow reverts (the default without a controller). */
      action: 'revert';
    }
  | {
      /** Give up and revert the whole flow, whatever enclosing flows would otherwise decide. */
      action: 'revertAll';
    };

/** Facts a controller decides on. */
export interface RetryContext {
  /** The task's name. */
  task: string;
  /** The attempt that just failed, from 1. */
  attempt: number;
  /** What `execute` threw. */
  error: unknown;
}

/** Decides whether a failed task is retried. Controllers are stateless: the attempt number comes from the log. */
export interface RetryController {
  /** The controller's kind (`'times'`, `'alternatives'`, `'revertAll'` or a custom name). */
  readonly kind: 'times' | 'alternatives' | 'revertAll' | (string & {});
  /** Parameters merged into the inputs of attempt `attempt` (from 1). */
  paramsFor?(attempt: number): JsonObject | undefined;
  /** Called after each failed attempt; says whether to retry or revert. */
  onFailure(context: RetryContext): RetryDecision;
}

export type { Backoff } from '@rigging/core';

/** Retries a failed task up to `n` more times, waiting `backoff` between attempts, then reverts. */
export function times(n: number, backoff?: Backoff): RetryController {
  if (n === undefined) throw new TypeError('times: n must be an integer >= 0, got undefined');
  const retries = nonNegativeIntegerOption('times', 'n', n, 0);
  const delay = backoffDelay('times(n, backoff)', backoff);
  return {
    kind: 'times',
    onFailure: ({ attempt }) =>
      attempt <= retries ? { action: 'retry', delayMs: delay(attempt) } : { action: 'revert' },
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
  const delay = backoffDelay('alternatives(paramSets, { backoff })', options.backoff);
  return {
    kind: 'alternatives',
    paramsFor: (attempt) => sets[attempt - 1],
    onFailure: ({ attempt }) =>
      attempt < sets.length
        ? { action: 'retry', delayMs: delay(attempt), params: sets[attempt]! }
        : { action: 'revert' },
  };
}

/** Never retries; a failure reverts the whole flow, including every enclosing flow. */
export const revertAll: RetryController = Object.freeze({
  kind: 'revertAll',
  onFailure: () => ({ action: 'revertAll' }) as const,
});
