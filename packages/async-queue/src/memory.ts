import { nonNegativeIntegerOption, systemClock, type SerializedError } from '@rigging/core';
import type {
  BackendContext,
  Claim,
  ClaimOptions,
  Completion,
  EnqueueInput,
  FailOutcome,
  QueueBackend,
} from './backend.js';
import { QueueError } from './errors.js';
import type { KeyInfo, KeyStatus, OpInfo, RetentionOptions } from './types.js';
import { randomUUID } from 'node:crypto';

interface OpRec extends OpInfo {
  token: number;
}

interface KeyRec {
  key: string;
  queue: OpRec[];
  running: OpRec | undefined;
  blockedBy: string | undefined;
  availAt: number;
  inReady: boolean;
}

/** Options of {@link memoryBackend}. */
export interface MemoryBackendOptions {
  /**
   * Succeeded and cancelled ops kept for `get`/idempotency (the oldest are forgotten first).
   * @default 10000
   */
  maxFinished?: number;
}

/**
 * Shared by completions that cancelled nothing and chained claims that poisoned nothing; frozen,
 * so sharing it shares no state.
 */
const NONE = Object.freeze([]) as never[];

function snapshot(op: OpRec, held = false): OpInfo {
  const { token: _token, ...info } = op;
  return held ? { ...info, held: true } : { ...info };
}

/**
 * The state of one memory backend and its operations: ops by id, keys with their queues, the
 * ready keys in round-robin order, delayed keys (retries), and finished ops kept for a while.
 */
class MemoryStore {
  /** The queue's context once attached (its clock). */
  ctx: BackendContext | undefined;
  readonly #maxFinished: number;
  readonly #ops = new Map<string, OpRec>();
  readonly #keys = new Map<string, KeyRec>();
  readonly #idempotency = new Map<string, string>();
  #ready: KeyRec[] = [];
  #readyHead = 0;
  readonly #delayed = new Set<KeyRec>();
  #finished: OpRec[] = [];
  #finishedHead = 0;
  readonly #failed: OpRec[] = [];

  constructor(maxFinished: number) {
    this.#maxFinished = maxFinished;
  }

  now(): number {
    return (this.ctx?.clock ?? systemClock).now();
  }

  #keyRec(key: string): KeyRec {
    let k = this.#keys.get(key);
    if (!k) {
      k = { key, queue: [], running: undefined, blockedBy: undefined, availAt: 0, inReady: false };
      this.#keys.set(key, k);
    }
    return k;
  }

  #makeReady(k: KeyRec): void {
    if (k.running || k.blockedBy !== undefined || k.queue.length === 0 || k.inReady) return;
    if (k.availAt > this.now()) {
      this.#delayed.add(k);
      return;
    }
    this.#delayed.delete(k);
    k.inReady = true;
    this.#ready.push(k);
  }

  #forgetKeyIfIdle(k: KeyRec): void {
    if (!k.running && k.blockedBy === undefined && k.queue.length === 0 && !k.inReady) {
      this.#keys.delete(k.key);
      this.#delayed.delete(k);
    }
  }

  #retire(op: OpRec): void {
    if (op.status === 'failed') {
      this.#failed.push(op);
      return;
    }
    this.#finished.push(op);
    while (this.#finished.length - this.#finishedHead > this.#maxFinished) {
      const old = this.#finished[this.#finishedHead++]!;
      this.#forget(old);
    }
    if (this.#finishedHead > 1024 && this.#finishedHead * 2 > this.#finished.length) {
      this.#finished = this.#finished.slice(this.#finishedHead);
      this.#finishedHead = 0;
    }
  }

  #forget(op: OpRec): void {
    if (this.#ops.get(op.id) === op) this.#ops.delete(op.id);
    if (op.idempotencyKey !== undefined && this.#idempotency.get(op.idempotencyKey) === op.id) {
      this.#idempotency.delete(op.idempotencyKey);
    }
  }

  #cancelQueued(k: KeyRec, cause: string): OpInfo[] {
    const out: OpInfo[] = [];
    const at = this.now();
    for (const op of k.queue) {
      op.status = 'cancelled';
      op.cancelledBy = cause;
      op.finishedAt = at;
      this.#retire(op);
      out.push(snapshot(op));
    }
    k.queue = [];
    return out;
  }

  #isHeld(op: OpRec): boolean {
    return op.status === 'queued' && this.#keys.get(op.key)?.blockedBy !== undefined;
  }

  /**
   * The claimed op if the claim still holds it. A claim's op is the record itself (`take`), and
   * a running op is never forgotten: no look-up needed.
   */
  held(claim: Claim): OpRec | undefined {
    const op = claim.op as OpRec;
    return op.status === 'running' && op.token === claim.token ? op : undefined;
  }

  #statusOf(k: KeyRec | undefined): KeyStatus {
    if (!k) return 'idle';
    if (k.blockedBy !== undefined) return 'blocked';
    if (k.running) return `${k.running.type}-in-progress`;
    const head = k.queue[0];
    if (!head) return 'idle';
    if (head.attempts > 0) return `${head.type}-in-progress`;
    return 'queued';
  }

  #take(k: KeyRec, at: number, claims: Claim[]): void {
    const op = k.queue.shift()!;
    op.status = 'running';
    op.attempts++;
    op.token++;
    op.startedAt = at;
    k.running = op;
    claims.push({ op, token: op.token });
  }

  #eligible(k: KeyRec, at: number): boolean {
    return !k.running && k.blockedBy === undefined && k.queue.length > 0 && k.availAt <= at;
  }

  /** Claims up to `limit` head ops, one per key, keys in round-robin order (or only `key`). */
  claim(limit: number, key: string | undefined): Claim[] {
    const claims: Claim[] = [];
    const at = this.now();
    if (key !== undefined) {
      const k = this.#keys.get(key);
      if (k && this.#eligible(k, at) && limit > 0) this.#take(k, at, claims);
      return claims;
    }
    if (this.#delayed.size > 0) {
      for (const k of this.#delayed) {
        if (k.availAt > at) continue;
        this.#delayed.delete(k);
        this.#makeReady(k);
      }
    }
    while (claims.length < limit && this.#readyHead < this.#ready.length) {
      const k = this.#ready[this.#readyHead++]!;
      k.inReady = false;
      if (this.#eligible(k, at)) this.#take(k, at, claims);
      else {
        this.#makeReady(k);
        this.#forgetKeyIfIdle(k);
      }
    }
    if (this.#readyHead > 1024 && this.#readyHead * 2 > this.#ready.length) {
      this.#ready = this.#ready.slice(this.#readyHead);
      this.#readyHead = 0;
    }
    return claims;
  }

  /** Stores an op, or finds the op its idempotency key named. */
  enqueue(input: EnqueueInput): { op: OpInfo; created: boolean } {
    if (input.idempotencyKey !== undefined) {
      const existing = this.#ops.get(this.#idempotency.get(input.idempotencyKey) ?? '');
      if (existing) {
        if (existing.key !== input.key || existing.type !== input.type) {
          throw new QueueError(
            'async-queue.idempotency_conflict',
            `idempotency key '${input.idempotencyKey}' was used for op ${existing.id} (key '${existing.key}', type '${existing.type}'), not key '${input.key}', type '${input.type}'`,
            { details: { id: existing.id, key: existing.key, type: existing.type } },
          );
        }
        return { op: snapshot(existing, this.#isHeld(existing)), created: false };
      }
    }
    const op: OpRec = {
      id: randomUUID(),
      key: input.key,
      type: input.type,
      payload: input.payload,
      status: 'queued',
      attempts: 0,
      createdAt: this.now(),
      // Every field from the start: one object shape for every op (faster property access).
      startedAt: undefined,
      finishedAt: undefined,
      result: undefined,
      error: undefined,
      cancelledBy: undefined,
      idempotencyKey: input.idempotencyKey,
      token: 0,
    };
    this.#ops.set(op.id, op);
    if (input.idempotencyKey !== undefined) this.#idempotency.set(input.idempotencyKey, op.id);
    const k = this.#keyRec(input.key);
    if (k.queue.length === 0 && !k.running) k.availAt = 0;
    k.queue.push(op);
    if (k.blockedBy !== undefined) return { op: snapshot(op, true), created: true };
    this.#makeReady(k);
    // The queue only reads what backends return; the record itself is never handed to users.
    return { op, created: true };
  }

  /** Records a success (and, with `next`, claims the next op); undefined when stale. */
  succeed(
    claim: Claim,
    result: unknown,
    next?: Omit<ClaimOptions, 'limit' | 'key'>,
  ): Completion | undefined {
    const op = this.held(claim);
    if (!op) return undefined;
    op.status = 'succeeded';
    op.result = result;
    op.error = undefined;
    op.finishedAt = this.now();
    const k = this.#keyRec(op.key);
    k.running = undefined;
    k.availAt = 0;
    this.#retire(op);
    this.#makeReady(k);
    this.#forgetKeyIfIdle(k);
    const chained = next ? { claims: this.claim(1, undefined), poisoned: NONE } : undefined;
    return { op, cancelled: NONE, blocked: false, next: chained };
  }

  fail(claim: Claim, error: SerializedError, outcome: FailOutcome): Completion | undefined {
    const op = this.held(claim);
    if (!op) return undefined;
    const k = this.#keyRec(op.key);
    k.running = undefined;
    op.error = error;
    if ('retryAt' in outcome) {
      op.status = 'queued';
      k.queue.unshift(op);
      k.availAt = outcome.retryAt;
      this.#makeReady(k);
      return { op: snapshot(op), cancelled: [], blocked: false };
    }
    op.status = 'failed';
    op.finishedAt = this.now();
    this.#retire(op);
    k.availAt = 0;
    let cancelled: OpInfo[] = [];
    if (outcome.stop) {
      cancelled = this.#cancelQueued(k, op.id);
      k.blockedBy = op.id;
    } else {
      this.#makeReady(k);
      this.#forgetKeyIfIdle(k);
    }
    return { op: snapshot(op), cancelled, blocked: outcome.stop };
  }

  release(claim: Claim, retryAt: number | undefined): boolean {
    const op = this.held(claim);
    if (!op) return false;
    const k = this.#keyRec(op.key);
    k.running = undefined;
    op.status = 'queued';
    op.attempts--;
    op.token++;
    k.queue.unshift(op);
    k.availAt = retryAt ?? 0;
    this.#makeReady(k);
    return true;
  }

  resume(key: string): boolean {
    const k = this.#keys.get(key);
    if (!k || k.blockedBy === undefined) return false;
    k.blockedBy = undefined;
    k.availAt = 0;
    this.#makeReady(k);
    this.#forgetKeyIfIdle(k);
    return true;
  }

  discard(key: string): OpInfo[] {
    const k = this.#keys.get(key);
    if (!k) return [];
    const cancelled = this.#cancelQueued(k, 'discard');
    k.blockedBy = undefined;
    this.#forgetKeyIfIdle(k);
    return cancelled;
  }

  get(id: string): OpInfo | undefined {
    const op = this.#ops.get(id);
    return op ? snapshot(op, this.#isHeld(op)) : undefined;
  }

  inspect(key: string): KeyInfo {
    const k = this.#keys.get(key);
    const blocked = k?.blockedBy !== undefined;
    return {
      key,
      status: this.#statusOf(k),
      blockedBy: k?.blockedBy,
      running: k?.running ? snapshot(k.running) : undefined,
      pending: k ? k.queue.map((op) => snapshot(op, blocked)) : [],
      held: blocked && k ? k.queue.length : 0,
    };
  }

  keyStatus(key: string): KeyStatus {
    return this.#statusOf(this.#keys.get(key));
  }

  activeKeys(limit: number): { key: string; status: KeyStatus }[] {
    const out: { key: string; status: KeyStatus }[] = [];
    for (const k of this.#keys.values()) {
      if (out.length >= limit) break;
      const status = this.#statusOf(k);
      if (status !== 'idle') out.push({ key: k.key, status });
    }
    return out;
  }

  deadLetters(limit: number): OpInfo[] {
    const out: OpInfo[] = [];
    for (let i = this.#failed.length - 1; i >= 0 && out.length < limit; i--) {
      const op = this.#failed[i]!;
      if (this.#ops.get(op.id) === op) out.push(snapshot(op));
    }
    return out;
  }

  prune(retention: RetentionOptions): number {
    let n = 0;
    const at = this.now();
    const old = (op: OpRec) =>
      retention.maxAgeMs !== undefined && (op.finishedAt ?? 0) < at - retention.maxAgeMs;
    while (this.#finishedHead < this.#finished.length) {
      const op = this.#finished[this.#finishedHead]!;
      const overCount =
        retention.maxCount !== undefined &&
        this.#finished.length - this.#finishedHead > retention.maxCount;
      if (!overCount && !old(op)) break;
      this.#finishedHead++;
      if (this.#ops.get(op.id) === op) n++;
      this.#forget(op);
    }
    for (let i = this.#failed.length - 1; i >= 0; i--) {
      const op = this.#failed[i]!;
      if (old(op) || this.#ops.get(op.id) !== op) {
        if (this.#ops.get(op.id) === op) n++;
        this.#forget(op);
        this.#failed.splice(i, 1);
      }
    }
    return n;
  }

  nextDueAt(): number | undefined {
    let min: number | undefined;
    for (const k of this.#delayed) if (min === undefined || k.availAt < min) min = k.availAt;
    return min;
  }
}

/**
 * The in-process backend (the default): ops live in this process's memory and are lost with
 * it. Per-key order, fairness and policies are the same as on the durable backends. It stores
 * through `enqueueNow` (at once) unless called on an object whose `enqueue` was replaced.
 */
export function memoryBackend(options: MemoryBackendOptions = {}): QueueBackend {
  const store = new MemoryStore(
    nonNegativeIntegerOption('memoryBackend', 'maxFinished', options.maxFinished, 10_000),
  );
  const backend: QueueBackend = {
    kind: 'memory',
    durable: false,
    pollMs: 0,
    async attach(context) {
      store.ctx = context;
    },
    async enqueue(input: EnqueueInput) {
      return store.enqueue(input);
    },
    enqueueNow(this: QueueBackend | undefined, input: EnqueueInput) {
      // Called on an object whose `enqueue` is not this one (a wrapper spread from this backend,
      // or this backend with `enqueue` replaced): decline, so that the replacement sees the op.
      if (this !== undefined && this.enqueue !== enqueue) return undefined;
      return store.enqueue(input);
    },
    async claim({ limit, key }) {
      return { claims: store.claim(limit, key), poisoned: [] };
    },
    async heartbeat(claims) {
      const lost = new Set<Claim>();
      for (const c of claims) if (!store.held(c)) lost.add(c);
      return lost;
    },
    async succeed(claim, result, next) {
      return store.succeed(claim, result, next);
    },
    async fail(claim, error: SerializedError, outcome: FailOutcome) {
      return store.fail(claim, error, outcome);
    },
    async release(claim, options) {
      return store.release(claim, options?.retryAt);
    },
    async resume(key) {
      return store.resume(key);
    },
    async discard(key) {
      return store.discard(key);
    },
    async get(id) {
      return store.get(id);
    },
    async inspect(key) {
      return store.inspect(key);
    },
    async keyStatus(key) {
      return store.keyStatus(key);
    },
    async activeKeys(limit) {
      return store.activeKeys(limit);
    },
    async deadLetters(limit) {
      return store.deadLetters(limit);
    },
    async prune(retention: RetentionOptions) {
      return store.prune(retention);
    },
    async nextDueAt() {
      return store.nextDueAt();
    },
    async close() {},
  };
  const { enqueue } = backend;
  return backend;
}
