import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import {
  backoffDelay,
  nonNegativeIntegerOption,
  nonNegativeOption,
  positiveIntegerOption,
  positiveOption,
  silentLogger,
  systemClock,
  type Clock,
  type Logger,
} from '@rigging/core';
import type { CommonQueueOptions, Handlers, Policy, RetentionOptions } from './types.js';

/** Names the owner of the options in the `TypeError` a bad value throws. */
const OWNER = 'createQueue';

/** A failure policy with every default applied. @internal */
export interface NormalPolicy {
  onFailure: 'stop' | 'continue';
  maxAttempts: number;
  /** Delay in ms before retry `n` (from 1). */
  backoff: (retry: number) => number;
}

/** Checks `policy` and applies its defaults (`'retry'` = stop after 3 attempts). */
function normalizePolicy(policy: Policy | undefined): NormalPolicy {
  if (policy === undefined || policy === 'stop' || policy === 'continue' || policy === 'retry') {
    return {
      onFailure: policy === 'continue' ? 'continue' : 'stop',
      maxAttempts: policy === 'retry' ? 3 : 1,
      backoff: backoffDelay(OWNER, {}),
    };
  }
  if (typeof policy !== 'object' || policy === null) {
    throw new TypeError(
      `${OWNER}: policy must be 'stop', 'continue', 'retry' or an object, got ${String(policy)}`,
    );
  }
  const onFailure = policy.onFailure ?? 'stop';
  if (onFailure !== 'stop' && onFailure !== 'continue') {
    throw new TypeError(
      `${OWNER}: policy.onFailure must be 'stop' or 'continue', got ${String(onFailure)}`,
    );
  }
  return {
    onFailure,
    maxAttempts: positiveIntegerOption(OWNER, 'policy.maxAttempts', policy.maxAttempts, 1),
    backoff: backoffDelay(OWNER, policy.backoff ?? {}),
  };
}

/** Checks retention options (`owner` names the caller in errors); returns them unchanged. @internal */
export function checkRetention(owner: string, retention: RetentionOptions): RetentionOptions {
  if (typeof retention !== 'object' || retention === null) {
    throw new TypeError(`${owner}: retention must be an object, got ${String(retention)}`);
  }
  nonNegativeIntegerOption(owner, 'retention.maxCount', retention.maxCount);
  nonNegativeOption(owner, 'retention.maxAgeMs', retention.maxAgeMs);
  return retention;
}

/** The options of `createQueue`, checked, with every default applied. @internal */
export interface ResolvedOptions<H extends Handlers> {
  handlers: H;
  /**
   * A producer typed by an op-type map (no handlers): the types it may enqueue (`'any'`: every
   * type). Undefined when the queue has handlers (then they say which types exist).
   */
  knownTypes: ReadonlySet<string> | 'any' | undefined;
  mode: 'async' | 'sync';
  /** 0 in sync mode. */
  concurrency: number;
  policy: NormalPolicy;
  logger: Logger;
  clock: Clock;
  leaseMs: number;
  heartbeatMs: number;
  maxLeaseExpiries: number;
  closeGraceMs: number;
  closeAbortWaitMs: number;
  retention: RetentionOptions | undefined;
  isWorker: boolean;
  workerId: string;
}

/** Checks every option of `createQueue` before anything starts. @internal */
export function resolveOptions<H extends Handlers>(
  options: CommonQueueOptions<H>,
): ResolvedOptions<H> {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`${OWNER}(options): options must be an object`);
  }
  const producer = options.worker === false && options.handlers === undefined;
  const handlers = (producer ? {} : options.handlers) as H;
  const types = (options as { types?: unknown }).types;
  if (types !== undefined) {
    if (!producer || !Array.isArray(types) || types.some((t) => typeof t !== 'string')) {
      throw new TypeError(
        `${OWNER}: types must be an array of op type names, on a producer (worker: false) without handlers`,
      );
    }
  }
  if (typeof handlers !== 'object' || handlers === null) {
    throw new TypeError(
      `${OWNER}: handlers must be an object of functions, got ${String(handlers)}`,
    );
  }
  for (const [type, fn] of Object.entries(handlers)) {
    if (typeof fn !== 'function') {
      throw new TypeError(`${OWNER}: handlers.${type} must be a function, got ${typeof fn}`);
    }
  }
  const concurrency = nonNegativeIntegerOption(OWNER, 'concurrency', options.concurrency, 1);
  const mode = options.mode ?? (concurrency === 0 ? 'sync' : 'async');
  if (mode !== 'sync' && mode !== 'async') {
    throw new TypeError(`${OWNER}: mode must be 'async' or 'sync', got ${String(mode)}`);
  }
  const leaseMs = positiveOption(OWNER, 'leaseMs', options.leaseMs, 30_000);
  const workerId =
    options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  if (typeof workerId !== 'string' || workerId.length === 0) {
    throw new TypeError(`${OWNER}: workerId must be a non-empty string, got ${String(workerId)}`);
  }
  return {
    handlers,
    knownTypes: producer ? (types === undefined ? 'any' : new Set(types as string[])) : undefined,
    mode,
    concurrency: mode === 'sync' ? 0 : concurrency,
    policy: normalizePolicy(options.policy),
    logger: options.logger ?? silentLogger,
    clock: options.clock ?? systemClock,
    leaseMs,
    heartbeatMs: positiveOption(OWNER, 'heartbeatMs', options.heartbeatMs, leaseMs / 3),
    maxLeaseExpiries:
      nonNegativeIntegerOption(OWNER, 'maxLeaseExpiries', options.maxLeaseExpiries, 3) || 1,
    closeGraceMs: nonNegativeOption(OWNER, 'closeGraceMs', options.closeGraceMs, 10_000),
    closeAbortWaitMs: nonNegativeOption(OWNER, 'closeAbortWaitMs', options.closeAbortWaitMs, 1000),
    retention:
      options.retention === undefined ? undefined : checkRetention(OWNER, options.retention),
    isWorker: options.worker ?? true,
    workerId,
  };
}
