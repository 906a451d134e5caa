import type {
  Backoff,
  BackoffSettings,
  Clock,
  Json,
  Lease,
  Logger,
  SerializedError,
} from '@rigging/core';
import type { QueueBackend } from './backend.js';
import type { KeyStatus, RetentionOptions } from './records.js';

export type { KeyInfo, KeyStatus, OpInfo, OpStatus, RetentionOptions } from './records.js';

/** What a handler receives besides the payload. */
export interface HandlerContext {
  /** The op id. */
  readonly id: string;
  /** The op id (the same as `id`; the name other packages' adapters use). */
  readonly opId: string;
  /** The op's key. */
  readonly key: string;
  /** The op type (the handler's name). */
  readonly type: string;
  /** 1 for the first run, 2 for the first retry or re-claim, … */
  readonly attempt: number;
  /**
   * Aborts when the op should be given back, never cancelled: the queue is closing (after its
   * grace period) or, on a durable backend, this worker lost its claim
   * (`async-queue.lease_lost`). Stop at a safe point and let the op run again (here or in
   * another worker); do not undo finished work because of it.
   */
  readonly signal: AbortSignal;
  /**
   * This worker's claim on the op as a {@link Lease}: `key` is the op's key, `token` the claim's
   * fencing token (a later claim of the op gets a higher one, and on the SQL backend a later claim
   * of any op of the key: a resource that records the highest token it saw can refuse a stale
   * worker's writes), `lost` aborts when the claim is lost (`signal` also aborts then, and when
   * the queue closes). Not released by the handler: the queue ends the claim when the op ends (`release()` does nothing). A
   * flow engine can run the op's flow under it (`@rigging/tasks`: `lease`, or `flowHandler`'s
   * `ownership: 'claim'`).
   */
  readonly lease: Lease;
  /**
   * Gives the op back unfinished: it is not failed, its attempt is not counted, its claim is
   * released and it is again the head of its key (later ops of the key stay behind it), runnable
   * by any worker after `delayMs` (default 0). `call`/`wait` keep waiting for its final outcome.
   * Throws a marker the queue recognises: `throw`/`return` it is not needed, and once called the
   * op is given back whatever the handler does afterwards (a handler that swallows the marker and
   * returns still gives the op back). Emits `op:given-back`.
   *
   * A worker that keeps getting the same op back waits a little longer each time before it can
   * take it again (see the README, "Give back").
   */
  giveBack(reason?: string, opts?: { delayMs?: number }): never;
}

/** One handler per op type: `(payload, context) => result`. */
export type Handler<P = any, R = unknown> = (payload: P, context: HandlerContext) => R | Promise<R>;

/** Handlers keyed by op type. */
export type Handlers = Record<string, Handler>;

/**
 * Op types described without handlers, for a producer (`worker: false`):
 * `{ [type]: { payload: P; result: R } }`.
 */
export type OpTypes = Record<string, { payload: unknown; result: unknown }>;

/** The handlers an {@link OpTypes} map stands for (what a worker of the same ops registers). */
export type HandlersOf<T extends OpTypes> = {
  [K in keyof T]: Handler<T[K]['payload'], T[K]['result']>;
};

/** An op for handlers `H`: `{ type, payload, idempotencyKey?, announce? }`. */
export type OpInput<H extends Handlers, T extends keyof H & string = keyof H & string> = {
  [K in T]: {
    /** The op type: which handler runs it. */
    type: K;
    /** The handler's first argument (JSON for durable backends). */
    payload: Parameters<H[K]>[0];
    /**
     * Enqueues with the same idempotency key (per queue name) return the first op's id instead
     * of adding an op, as long as that op is retained.
     */
    idempotencyKey?: string | undefined;
    /**
     * Announce the op's end to every process at once (NOTIFY on PostgreSQL, the shared
     * `Notifier` in one process), so that a `wait` or `get(id, { waitMs })` elsewhere settles
     * without waiting for its next poll. `call` always announces. Costs one notification per op.
     */
    announce?: boolean | undefined;
  };
}[T];

/** Options of `queue.get(id, options)`. */
export interface GetOptions {
  /**
   * Waits up to this many milliseconds for the op to end (a long poll); 0 or undefined answers
   * at once.
   */
  waitMs?: number | undefined;
  /** Ends the wait early; `get` then rejects with `signal.reason`. */
  signal?: AbortSignal | undefined;
}

/** The result type of handler `T`. */
export type ResultOf<H extends Handlers, T extends keyof H> = Awaited<ReturnType<H[T]>>;

/**
 * Exponential backoff between retries: `{ initialMs, factor, maxMs, jitter }`.
 * @deprecated Use `BackoffSettings` (or the wider `Backoff`) from `@rigging/core`; this alias
 * is kept so that code written against 0.x keeps compiling.
 */
export type BackoffOptions = BackoffSettings;

/** Failure policy of a queue. */
export interface PolicyOptions {
  /**
   * After the last attempt failed: `stop` cancels the key's queued ops (with the failed op as
   * cause) and blocks the key until `resume`/`discard`; `continue` goes on with the next op.
   * @default 'stop'
   */
  onFailure?: 'stop' | 'continue';
  /** Attempts per op (1 = no retry). @default 1 */
  maxAttempts?: number;
  /**
   * Delay before retry n (1-based): fixed ms, a function of n, or exponential settings
   * (`@rigging/core`'s `Backoff`). @default { initialMs: 100, factor: 2, maxMs: 30000 }
   */
  backoff?: Backoff | undefined;
}

/** `'stop'`, `'continue'`, `'retry'` (= stop after 3 attempts with backoff) or options. */
export type Policy = 'stop' | 'continue' | 'retry' | PolicyOptions;

/** Typed events of a queue (what this queue instance did or observed). */
export interface QueueEvents {
  /** An op was stored (or an idempotent repeat returned an existing one). */
  'op:queued': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** True when the idempotency key matched a retained op: nothing was added. */
    deduplicated: boolean;
    /** The key is `blocked`: the op is held until `resume`/`discard`. */
    held?: boolean | undefined;
  };
  /** This queue's worker started an attempt of an op. */
  'op:started': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The attempt, from 1. */
    attempt: number;
    /** The worker running it (the `workerId` option). */
    workerId: string;
  };
  /** An op's handler returned. */
  'op:succeeded': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The attempt, from 1. */
    attempt: number;
    /** What the handler returned. */
    result: unknown;
    /** Milliseconds from the start of the attempt to its recorded success (queue clock). */
    durationMs: number;
  };
  /** An attempt failed and the op will be retried. */
  'op:retrying': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The attempt that failed, from 1. */
    attempt: number;
    /** What the handler threw, serialized. */
    error: SerializedError;
    /** Epoch milliseconds (queue clock) at which the op becomes runnable again. */
    retryAt: number;
  };
  /** An op's last attempt failed: the op is `failed`. */
  'op:failed': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The attempt that failed, from 1. */
    attempt: number;
    /** What the handler threw, serialized. */
    error: SerializedError;
  };
  /** A queued op was cancelled (by a failure under the `stop` policy, or by `discard`). */
  'op:cancelled': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The failed op id (stop policy), or `discard`. */
    cause: string;
  };
  /** A completion from a stale claim was refused (the lease had expired and the op moved on). */
  'op:refused': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The attempt the stale claim ran, from 1. */
    attempt: number;
  };
  /** Given back unfinished (graceful close); another worker will run it. */
  'op:released': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
  };
  /**
   * A handler gave its op back unfinished (`ctx.giveBack`): queued again at the head of its key,
   * attempt not counted, runnable from `retryAt`.
   */
  'op:given-back': {
    /** The op id. */
    id: string;
    /** The op's key. */
    key: string;
    /** The op type (its handler's name). */
    type: string;
    /** The reason given to `giveBack`, if any. */
    reason: string | undefined;
    /** Epoch milliseconds (queue clock) from which a worker may claim it again. */
    retryAt: number;
  };
  /** A key's status changed (as this queue saw it). */
  'key:status': {
    /** The key. */
    key: string;
    /** Its new status. */
    status: KeyStatus;
  };
  /** An op failed under the `stop` policy: its key holds new ops until `resume`/`discard`. */
  'key:blocked': {
    /** The key. */
    key: string;
    /** The failed op that blocked it. */
    opId: string;
    /** What the failed op threw, serialized. */
    error: SerializedError;
  };
  /** `resume(key)` unblocked a key; its held ops become runnable. */
  'key:resumed': {
    /** The key. */
    key: string;
  };
  /** `discard(key)` cancelled a key's queued ops and unblocked it. */
  'key:discarded': {
    /** The key. */
    key: string;
    /** Ids of the cancelled ops. */
    cancelled: string[];
  };
}

/**
 * Options of a producer-only queue typed by an {@link OpTypes} map: no handlers, never claims.
 * `types` (optional) lists the op types it may enqueue; others are refused with
 * `async-queue.unknown_type` (without it, any type of the map is accepted).
 */
export interface ProducerQueueOptions<T extends OpTypes> extends Omit<
  CommonQueueOptions<HandlersOf<T>>,
  'handlers' | 'worker' | 'mode' | 'concurrency'
> {
  /** A producer never claims ops. */
  worker: false;
  /** A producer has no handlers. */
  handlers?: undefined;
  /** The op types this producer may enqueue, checked at run time. @default every type */
  types?: readonly (keyof T & string)[];
}

/** Options shared by every queue. */
export interface CommonQueueOptions<H extends Handlers> {
  /** @default memoryBackend() */
  backend?: QueueBackend;
  /**
   * How many ops (of different keys) run at once in this queue instance; `0` = sync mode.
   * @default 1
   */
  concurrency?: number;
  /** `'sync'` runs ops inline in the caller of `cast`/`call` (as `concurrency: 0`). @default 'async' */
  mode?: 'async' | 'sync';
  /** One handler per op type; enqueuing a type without one throws `async-queue.unknown_type`. */
  handlers: H;
  /** @default 'stop' */
  policy?: Policy;
  /** Set to false for a producer-only instance that never claims ops. @default true */
  worker?: boolean;
  /** @default silentLogger */
  logger?: Logger;
  /** @default systemClock */
  clock?: Clock;
  /** Name of this worker in claims and events. @default `${hostname}:${pid}:<random>` */
  workerId?: string;
  /** Durable backends: how long a claim lasts without a heartbeat. @default 30000 */
  leaseMs?: number;
  /** Durable backends: heartbeat period. @default leaseMs / 3 */
  heartbeatMs?: number;
  /** Durable backends: an op whose lease expired this many times fails as poison. @default 3 */
  maxLeaseExpiries?: number;
  /** How long `close()` lets in-flight handlers finish before aborting their signal. @default 10000 */
  closeGraceMs?: number;
  /**
   * How long `close()` then waits for aborted handlers to stop (a handler that finishes its
   * current step first, a flow suspending at a task boundary) before giving their ops back
   * anyway, for another worker to run while this one may still be at it. @default 1000
   */
  closeAbortWaitMs?: number;
  /** Retention of finished ops. */
  retention?: RetentionOptions;
}

export type { Json };
