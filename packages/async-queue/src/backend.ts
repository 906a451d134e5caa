import type { Clock, Logger, SerializedError } from '@rigging/core';
import type { KeyInfo, KeyStatus, OpInfo, RetentionOptions } from './records.js';

/** What a backend stores for a new op. */
export interface EnqueueInput {
  /** The key the op is ordered under. */
  key: string;
  /** The op type (the handler's name). */
  type: string;
  /** The handler's input (JSON for durable backends). */
  payload: unknown;
  /** An enqueue whose idempotency key matches a retained op's returns that op instead (`created: false`). */
  idempotencyKey?: string | undefined;
  /** Someone is waiting for the outcome (`call`): a durable backend may announce it. */
  waited?: boolean | undefined;
}

/** A claimed op. `token` is the fencing token: completions carrying an older one are refused. */
export interface Claim {
  /** The claimed op (status `running`, `attempts` already counted). */
  op: OpInfo;
  /** The fencing token of this claim; every claim of the op gets a higher one. */
  token: number;
  /** Durable backends: announce the outcome to other processes (a `call` waits for it). */
  announce?: boolean | undefined;
}

/** Options of {@link QueueBackend.claim}. */
export interface ClaimOptions {
  /** At most this many claims (one per key). */
  limit: number;
  /** How long each claim lasts without a heartbeat, in milliseconds. */
  leaseMs: number;
  /** The claiming worker's id (durable backends record it with the claim). */
  workerId: string;
  /** Only this key's head op (sync mode). */
  key?: string | undefined;
  /** An op whose lease expired this many times is failed as poison instead of re-claimed. */
  maxLeaseExpiries: number;
  /** A poisoned op blocks its key and cancels its queued ops (the queue's policy is `stop`). */
  stopOnPoison: boolean;
}

/** Changes a completion made, for events. */
export interface Completion {
  /** The op as it is after the completion. */
  op: OpInfo;
  /** Ops cancelled because `op` failed under `stop`. */
  cancelled: OpInfo[];
  /** True when the key is now blocked. */
  blocked: boolean;
  /** What `succeed(…, next)` claimed in the same transaction, if the backend does that. */
  next?:
    | {
        /** The ops claimed. */
        claims: Claim[];
        /** Ops failed as poison while claiming. */
        poisoned: Completion[];
      }
    | undefined;
}

/** How the queue tells the backend to settle a failed attempt. */
export type FailOutcome =
  | {
      /** Queue the op again, runnable from this epoch ms. */
      retryAt: number;
    }
  | {
      /** Fail the op for good; `true` also cancels the key's queued ops and blocks the key. */
      stop: boolean;
    };

/** Options of {@link QueueBackend.release}. */
export interface ReleaseOptions {
  /** Epoch ms (queue clock) from which the op may be claimed again. @default now */
  retryAt?: number | undefined;
}

/** What a backend learns from its queue when attached. */
export interface BackendContext {
  /** The queue's clock (op timestamps, leases, retry times). */
  clock: Clock;
  /** The queue's logger. */
  logger: Logger;
  /** Call when new work may be claimable (another process enqueued, …). */
  wake(): void;
  /** Call when an op finished elsewhere (another process), so local `call`s can settle. */
  settled(id: string): void;
  /**
   * False when the queue never claims (a producer, `worker: false`): it needs no `wake` calls,
   * which a backend may then not listen for. @default true
   */
  claims?: boolean | undefined;
}

/**
 * The storage contract behind `createQueue`. `memoryBackend()` and `sqlBackend()` implement it;
 * the conformance suite checks any implementation. Methods are atomic per call.
 */
export interface QueueBackend {
  /** The backend's name, for diagnostics: `'memory'`, or `'sql:<dialect>'`. */
  readonly kind: string;
  /** True when ops survive a process crash (enables leases, heartbeats and result polling). */
  readonly durable: boolean;
  /** Called once by the queue before any other call; prepares storage (for example runs migrations). */
  attach(context: BackendContext): Promise<void>;
  /** Stores an op; resolves once it is durable. `created: false` for an idempotent repeat. */
  enqueue(input: EnqueueInput): Promise<{
    /** The stored op (or the retained one with the same idempotency key). */
    op: OpInfo;
    /** False when an idempotent repeat returned an existing op. */
    created: boolean;
  }>;
  /**
   * Optional: stores an op at once, as `enqueue` would, and returns what `enqueue` would resolve
   * with; throws what it would reject with. Returns `undefined` to decline (nothing stored): the
   * queue then calls `enqueue`. A backend whose storing is synchronous implements it so that a
   * burst of `cast`s keeps no pending call per op; durable backends leave it out.
   *
   * The queue calls it as a method of this object, only after `attach` was called (possibly
   * before its promise settled: decline while not ready), and never while an earlier `enqueue`
   * of its own waits for `attach`. Ops reach the backend in call order through both methods, so
   * a backend that answers here while one of its `enqueue`s is still in flight must decline
   * until that one is stored. A wrapper that replaces `enqueue` must replace or remove this too.
   */
  enqueueNow?(input: EnqueueInput):
    | {
        /** The stored op (or the retained one with the same idempotency key). */
        op: OpInfo;
        /** False when an idempotent repeat returned an existing op. */
        created: boolean;
      }
    | undefined;
  /**
   * Claims up to `limit` runnable head ops, one per key, keys in round-robin order (the key that
   * waited longest first). Expired claims are re-claimed; an op whose lease expired
   * `maxLeaseExpiries` times is failed as poison instead (returned in `poisoned`).
   */
  claim(options: ClaimOptions): Promise<{
    /** The ops claimed. */
    claims: Claim[];
    /** Ops failed as poison instead of re-claimed. */
    poisoned: Completion[];
    /**
     * When it claimed fewer than `limit`, a backend may also tell what `nextDueAt` would answer
     * now (`null`: nothing due later), which spares the worker that read before it waits.
     */
    due?: number | null | undefined;
  }>;
  /** Extends leases; returns the claims that are no longer held (same objects). */
  heartbeat(claims: readonly Claim[], leaseMs: number): Promise<Set<Claim>>;
  /**
   * Records success; `undefined` when the claim is stale (refused). With `next`, a backend may
   * also claim the next runnable op (fairly, as `claim` would) and return it in `next`.
   */
  succeed(
    claim: Claim,
    result: unknown,
    next?: Omit<ClaimOptions, 'limit' | 'key'>,
  ): Promise<Completion | undefined>;
  /** Records a failed attempt: reschedule it (`retryAt`), or fail it (`stop` blocks the key). */
  fail(claim: Claim, error: SerializedError, outcome: FailOutcome): Promise<Completion | undefined>;
  /**
   * Gives an unfinished op back: queued again at the head of its key, the claim's attempt not
   * counted (`attempts` goes back down by one), runnable from `options.retryAt` (default: now).
   * False when the claim no longer holds the op (stale: nothing changes).
   */
  release(claim: Claim, options?: ReleaseOptions): Promise<boolean>;
  /** Unblocks a key; held ops become runnable. False when it was not blocked. */
  resume(key: string): Promise<boolean>;
  /** Cancels every queued op of the key and unblocks it; returns the cancelled ops. */
  discard(key: string): Promise<OpInfo[]>;
  /** The op, while retained. */
  get(id: string): Promise<OpInfo | undefined>;
  /** Optional: the retained ops of `ids` (any order; unknown ids left out), in one read. */
  getMany?(ids: readonly string[]): Promise<OpInfo[]>;
  /** The key's status, its running op and its pending ops in order. */
  inspect(key: string): Promise<KeyInfo>;
  /** The key's status now. */
  keyStatus(key: string): Promise<KeyStatus>;
  /** Keys that are not idle (queued, in progress or blocked), at most `limit`. */
  activeKeys(limit: number): Promise<
    {
      /** The key. */
      key: string;
      /** Its status now. */
      status: KeyStatus;
    }[]
  >;
  /** Failed ops still retained, newest first. */
  deadLetters(limit: number): Promise<OpInfo[]>;
  /** Deletes finished ops outside `retention`; returns how many. */
  prune(retention: RetentionOptions): Promise<number>;
  /** Epoch ms when the next delayed (retrying) op becomes runnable, if any is known. */
  nextDueAt(): Promise<number | undefined>;
  /** Polling interval for durable backends without push (0 = push only). */
  readonly pollMs: number;
  /**
   * Optional: a wait for ops is about to read one; resolves once an end announced from now on
   * reaches `settled` (a backend that listens for ends lazily starts here).
   */
  watchEnds?(): Promise<void>;
  /** Stops the backend's own activity (listeners, timers); never closes a caller's database. */
  close(): Promise<void>;
}
