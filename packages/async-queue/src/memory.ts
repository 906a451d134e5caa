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
 * The memory backend's hot methods without a promise each: the queue calls these directly (ops
 * are stored in call order either way). Internal: not exported from the package.
 */
export interface SyncMethods {
  enqueue(input: EnqueueInput): { op: OpInfo; created: boolean };
  succeed(
    claim: Claim,
    result: unknown,
    next?: Omit<ClaimOptions, 'limit' | 'key'>,
  ): Completion | undefined;
}

/** The synchronous methods of each memory backend, while its own methods are not replaced. */
const syncOf = new WeakMap<
  QueueBackend,
  SyncMethods & { wraps: Pick<QueueBackend, 'enqueue' | 'succeed'> }
>();

/** The backend's synchronous methods, unless it is not a memory backend or someone replaced them. */
export function syncMethods(backend: QueueBackend): SyncMethods | undefined {
  const s = syncOf.get(backend);
  if (!s) return undefined;
  return backend.enqueue === s.wraps.enqueue && backend.succeed === s.wraps.succeed ? s : undefined;
}

/** Shared by completions that cancelled nothing and chained claims that poisoned nothing. */
const NONE: never[] = [];

function snapshot(op: OpRec, held = false): OpInfo {
  const { token: _token, ...info } = op;
  return held ? { ...info, held: true } : { ...info };
}

/**
 * The in-process backend (the default): ops live in this process's memory and are lost with
 * it. Per-key order, fairness and policies are the same as on the durable backends.
 */
export function memoryBackend(options: MemoryBackendOptions = {}): QueueBackend {
  const maxFinished = nonNegativeIntegerOption(
    'memoryBackend',
    'maxFinished',
    options.maxFinished,
    10_000,
  );
  let ctx: BackendContext | undefined;
  const now = () => (ctx?.clock ?? systemClock).now();
  const ops = new Map<string, OpRec>();
  const keys = new Map<string, KeyRec>();
  const idempotency = new Map<string, string>();
  let ready: KeyRec[] = [];
  let readyHead = 0;
  const delayed = new Set<KeyRec>();
  let finished: OpRec[] = [];
  let finishedHead = 0;
  const failed: OpRec[] = [];

  const keyRec = (key: string): KeyRec => {
    let k = keys.get(key);
    if (!k) {
      k = { key, queue: [], running: undefined, blockedBy: undefined, availAt: 0, inReady: false };
      keys.set(key, k);
    }
    return k;
  };

  const makeReady = (k: KeyRec) => {
    if (k.running || k.blockedBy !== undefined || k.queue.length === 0 || k.inReady) return;
    if (k.availAt > now()) {
      delayed.add(k);
      return;
    }
    delayed.delete(k);
    k.inReady = true;
    ready.push(k);
  };

  const forgetKeyIfIdle = (k: KeyRec) => {
    if (!k.running && k.blockedBy === undefined && k.queue.length === 0 && !k.inReady) {
      keys.delete(k.key);
      delayed.delete(k);
    }
  };

  const retire = (op: OpRec) => {
    if (op.status === 'failed') {
      failed.push(op);
      return;
    }
    finished.push(op);
    while (finished.length - finishedHead > maxFinished) {
      const old = finished[finishedHead++]!;
      forget(old);
    }
    if (finishedHead > 1024 && finishedHead * 2 > finished.length) {
      finished = finished.slice(finishedHead);
      finishedHead = 0;
    }
  };

  const forget = (op: OpRec) => {
    if (ops.get(op.id) === op) ops.delete(op.id);
    if (op.idempotencyKey !== undefined && idempotency.get(op.idempotencyKey) === op.id) {
      idempotency.delete(op.idempotencyKey);
    }
  };

  const cancelQueued = (k: KeyRec, cause: string): OpInfo[] => {
    const out: OpInfo[] = [];
    const at = now();
    for (const op of k.queue) {
      op.status = 'cancelled';
      op.cancelledBy = cause;
      op.finishedAt = at;
      retire(op);
      out.push(snapshot(op));
    }
    k.queue = [];
    return out;
  };

  const isHeld = (op: OpRec) => op.status === 'queued' && keys.get(op.key)?.blockedBy !== undefined;

  /**
   * The claimed op if the claim still holds it. A claim's op is the record itself (`take`), and
   * a running op is never forgotten: no look-up needed.
   */
  const held = (claim: Claim): OpRec | undefined => {
    const op = claim.op as OpRec;
    return op.status === 'running' && op.token === claim.token ? op : undefined;
  };

  const statusOf = (k: KeyRec | undefined): KeyStatus => {
    if (!k) return 'idle';
    if (k.blockedBy !== undefined) return 'blocked';
    if (k.running) return `${k.running.type}-in-progress`;
    const head = k.queue[0];
    if (!head) return 'idle';
    if (head.attempts > 0) return `${head.type}-in-progress`;
    return 'queued';
  };

  const take = (k: KeyRec, at: number, claims: Claim[]) => {
    const op = k.queue.shift()!;
    op.status = 'running';
    op.attempts++;
    op.token++;
    op.startedAt = at;
    k.running = op;
    claims.push({ op, token: op.token });
  };

  const eligible = (k: KeyRec, at: number) =>
    !k.running && k.blockedBy === undefined && k.queue.length > 0 && k.availAt <= at;

  const claimNow = (limit: number, key: string | undefined): Claim[] => {
    const claims: Claim[] = [];
    const at = now();
    if (key !== undefined) {
      const k = keys.get(key);
      if (k && eligible(k, at) && limit > 0) take(k, at, claims);
      return claims;
    }
    if (delayed.size > 0) {
      for (const k of delayed) {
        if (k.availAt > at) continue;
        delayed.delete(k);
        makeReady(k);
      }
    }
    while (claims.length < limit && readyHead < ready.length) {
      const k = ready[readyHead++]!;
      k.inReady = false;
      if (eligible(k, at)) take(k, at, claims);
      else {
        makeReady(k);
        forgetKeyIfIdle(k);
      }
    }
    if (readyHead > 1024 && readyHead * 2 > ready.length) {
      ready = ready.slice(readyHead);
      readyHead = 0;
    }
    return claims;
  };

  const enqueueNow = (input: EnqueueInput): { op: OpInfo; created: boolean } => {
    if (input.idempotencyKey !== undefined) {
      const existing = ops.get(idempotency.get(input.idempotencyKey) ?? '');
      if (existing) {
        if (existing.key !== input.key || existing.type !== input.type) {
          throw new QueueError(
            'async-queue.idempotency_conflict',
            `idempotency key '${input.idempotencyKey}' was used for op ${existing.id} (key '${existing.key}', type '${existing.type}'), not key '${input.key}', type '${input.type}'`,
            { details: { id: existing.id, key: existing.key, type: existing.type } },
          );
        }
        return { op: snapshot(existing, isHeld(existing)), created: false };
      }
    }
    const op: OpRec = {
      id: randomUUID(),
      key: input.key,
      type: input.type,
      payload: input.payload,
      status: 'queued',
      attempts: 0,
      createdAt: now(),
      // Every field from the start: one object shape for every op (faster property access).
      startedAt: undefined,
      finishedAt: undefined,
      result: undefined,
      error: undefined,
      cancelledBy: undefined,
      idempotencyKey: input.idempotencyKey,
      token: 0,
    };
    ops.set(op.id, op);
    if (input.idempotencyKey !== undefined) idempotency.set(input.idempotencyKey, op.id);
    const k = keyRec(input.key);
    if (k.queue.length === 0 && !k.running) k.availAt = 0;
    k.queue.push(op);
    if (k.blockedBy !== undefined) return { op: snapshot(op, true), created: true };
    makeReady(k);
    // The queue only reads what backends return; the record itself is never handed to users.
    return { op, created: true };
  };

  const succeedNow: SyncMethods['succeed'] = (claim, result, next) => {
    const op = held(claim);
    if (!op) return undefined;
    op.status = 'succeeded';
    op.result = result;
    op.error = undefined;
    op.finishedAt = now();
    const k = keyRec(op.key);
    k.running = undefined;
    k.availAt = 0;
    retire(op);
    makeReady(k);
    forgetKeyIfIdle(k);
    const chained = next ? { claims: claimNow(1, undefined), poisoned: NONE } : undefined;
    return { op, cancelled: NONE, blocked: false, next: chained };
  };

  const backend: QueueBackend = {
    kind: 'memory',
    durable: false,
    pollMs: 0,
    async attach(context) {
      ctx = context;
    },
    async enqueue(input: EnqueueInput) {
      return enqueueNow(input);
    },
    async claim({ limit, key }) {
      return { claims: claimNow(limit, key), poisoned: [] };
    },
    async heartbeat(claims) {
      const lost = new Set<Claim>();
      for (const c of claims) if (!held(c)) lost.add(c);
      return lost;
    },
    async succeed(claim, result, next) {
      return succeedNow(claim, result, next);
    },
    async fail(claim, error: SerializedError, outcome: FailOutcome) {
      const op = held(claim);
      if (!op) return undefined;
      const k = keyRec(op.key);
      k.running = undefined;
      op.error = error;
      if ('retryAt' in outcome) {
        op.status = 'queued';
        k.queue.unshift(op);
        k.availAt = outcome.retryAt;
        makeReady(k);
        return { op: snapshot(op), cancelled: [], blocked: false };
      }
      op.status = 'failed';
      op.finishedAt = now();
      retire(op);
      k.availAt = 0;
      let cancelled: OpInfo[] = [];
      if (outcome.stop) {
        cancelled = cancelQueued(k, op.id);
        k.blockedBy = op.id;
      } else {
        makeReady(k);
        forgetKeyIfIdle(k);
      }
      return { op: snapshot(op), cancelled, blocked: outcome.stop };
    },
    async release(claim) {
      const op = held(claim);
      if (!op) return false;
      const k = keyRec(op.key);
      k.running = undefined;
      op.status = 'queued';
      op.token++;
      k.queue.unshift(op);
      makeReady(k);
      return true;
    },
    async resume(key) {
      const k = keys.get(key);
      if (!k || k.blockedBy === undefined) return false;
      k.blockedBy = undefined;
      k.availAt = 0;
      makeReady(k);
      forgetKeyIfIdle(k);
      return true;
    },
    async discard(key) {
      const k = keys.get(key);
      if (!k) return [];
      const cancelled = cancelQueued(k, 'discard');
      k.blockedBy = undefined;
      forgetKeyIfIdle(k);
      return cancelled;
    },
    async get(id) {
      const op = ops.get(id);
      return op ? snapshot(op, isHeld(op)) : undefined;
    },
    async inspect(key): Promise<KeyInfo> {
      const k = keys.get(key);
      const blocked = k?.blockedBy !== undefined;
      return {
        key,
        status: statusOf(k),
        blockedBy: k?.blockedBy,
        running: k?.running ? snapshot(k.running) : undefined,
        pending: k ? k.queue.map((op) => snapshot(op, blocked)) : [],
        held: blocked && k ? k.queue.length : 0,
      };
    },
    async keyStatus(key) {
      return statusOf(keys.get(key));
    },
    async activeKeys(limit) {
      const out: { key: string; status: KeyStatus }[] = [];
      for (const k of keys.values()) {
        if (out.length >= limit) break;
        const status = statusOf(k);
        if (status !== 'idle') out.push({ key: k.key, status });
      }
      return out;
    },
    async deadLetters(limit) {
      const out: OpInfo[] = [];
      for (let i = failed.length - 1; i >= 0 && out.length < limit; i--) {
        const op = failed[i]!;
        if (ops.get(op.id) === op) out.push(snapshot(op));
      }
      return out;
    },
    async prune(retention: RetentionOptions) {
      let n = 0;
      const at = now();
      const old = (op: OpRec) =>
        retention.maxAgeMs !== undefined && (op.finishedAt ?? 0) < at - retention.maxAgeMs;
      while (finishedHead < finished.length) {
        const op = finished[finishedHead]!;
        const overCount =
          retention.maxCount !== undefined && finished.length - finishedHead > retention.maxCount;
        if (!overCount && !old(op)) break;
        finishedHead++;
        if (ops.get(op.id) === op) n++;
        forget(op);
      }
      for (let i = failed.length - 1; i >= 0; i--) {
        const op = failed[i]!;
        if (old(op) || ops.get(op.id) !== op) {
          if (ops.get(op.id) === op) n++;
          forget(op);
          failed.splice(i, 1);
        }
      }
      return n;
    },
    async nextDueAt() {
      let min: number | undefined;
      for (const k of delayed) if (min === undefined || k.availAt < min) min = k.availAt;
      return min;
    },
    async close() {},
  };
  syncOf.set(backend, {
    enqueue: enqueueNow,
    succeed: succeedNow,
    wraps: { enqueue: backend.enqueue, succeed: backend.succeed },
  });
  return backend;
}
