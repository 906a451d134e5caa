import type { Clock, Logger, SerializedError } from '@rigging/core';
import type { KeyInfo, KeyStatus, OpInfo, RetentionOptions } from './types.js';

/** What a backend stores for a new op. */
export interface EnqueueInput {
  key: string;
  type: string;
  payload: unknown;
  idempotencyKey?: string | undefined;
  /** Someone is waiting for the outcome (`call`): a durable backend may announce it. */
  waited?: boolean | undefined;
}

/** A claimed op. `token` is the fencing token: completions carrying an older one are refused. */
export interface Claim {
  op: OpInfo;
  token: number;
  /** Durable backends: announce the outcome to other processes (a `call` waits for it). */
  announce?: boolean | undefined;
}

/** Options of {@link QueueBackend.claim}. */
export interface ClaimOptions {
  limit: number;
  leaseMs: number;
  workerId: string;
  /** Only this key's head op (sync mode). */
  key?: string | undefined;
  maxLeaseExpiries: number;
  stopOnPoison: boolean;
}

/** Changes a completion made, for events. */
export interface Completion {
  op: OpInfo;
  /** Ops cancelled because `op` failed under `stop`. */
  cancelled: OpInfo[];
  /** True when the key is now blocked. */
  blocked: boolean;
  /** What `succeed(…, next)` claimed in the same transaction, if the backend does that. */
  next?: { claims: Claim[]; poisoned: Completion[] } | undefined;
}

/** How the queue tells the backend to settle a failed attempt. */
export type FailOutcome = { retryAt: number } | { stop: boolean };

/** What a backend learns from its queue when attached. */
export interface BackendContext {
  clock: Clock;
  logger: Logger;
  /** Call when new work may be claimable (another process enqueued, …). */
  wake(): void;
  /** Call when an op finished elsewhere (another process), so local `call`s can settle. */
  settled(id: string): void;
}

/**
 * The storage contract behind `createQueue`. `memoryBackend()` and `sqlBackend()` implement it;
 * the conformance suite checks any implementation. Methods are atomic per call.
 */
export interface QueueBackend {
  readonly kind: string;
  /** True when ops survive a process crash (enables leases, heartbeats and result polling). */
  readonly durable: boolean;
  attach(context: BackendContext): Promise<void>;
  /** Stores an op; resolves once it is durable. `created: false` for an idempotent repeat. */
  enqueue(input: EnqueueInput): Promise<{ op: OpInfo; created: boolean }>;
  /**
   * Claims up to `limit` runnable head ops, one per key, keys in round-robin order (the key that
   * waited longest first). Expired claims are re-claimed; an op whose lease expired
   * `maxLeaseExpiries` times is failed as poison instead (returned in `poisoned`).
   */
  claim(options: ClaimOptions): Promise<{ claims: Claim[]; poisoned: Completion[] }>;
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
  /** Gives an unfinished op back (queued again, attempt not counted as a failure). */
  release(claim: Claim): Promise<boolean>;
  /** Unblocks a key; held ops become runnable. False when it was not blocked. */
  resume(key: string): Promise<boolean>;
  /** Cancels every queued op of the key and unblocks it; returns the cancelled ops. */
  discard(key: string): Promise<OpInfo[]>;
  get(id: string): Promise<OpInfo | undefined>;
  inspect(key: string): Promise<KeyInfo>;
  keyStatus(key: string): Promise<KeyStatus>;
  /** Keys that are not idle (queued, in progress or blocked), at most `limit`. */
  activeKeys(limit: number): Promise<{ key: string; status: KeyStatus }[]>;
  /** Failed ops still retained, newest first. */
  deadLetters(limit: number): Promise<OpInfo[]>;
  /** Deletes finished ops outside `retention`; returns how many. */
  prune(retention: RetentionOptions): Promise<number>;
  /** Epoch ms when the next delayed (retrying) op becomes runnable, if any is known. */
  nextDueAt(): Promise<number | undefined>;
  /** Polling interval for durable backends without push (0 = push only). */
  readonly pollMs: number;
  close(): Promise<void>;
}
