import {
  deferred,
  explainNotJson,
  scopedSignal,
  serializeError,
  nonNegativeIntegerOption,
  throwIfAborted,
  timeoutOption,
  TypedEmitter,
  type Clock,
  type Deferred,
  type Listener,
  type Logger,
  type SerializedError,
  type WaitOptions,
} from '@rigging/core';
import type { Claim, ClaimOptions, Completion, EnqueueInput, QueueBackend } from './backend.js';
import { QueueError } from './errors.js';
import { memoryBackend, syncMethods, type SyncMethods } from './memory.js';
import { checkRetention, resolveOptions, type NormalPolicy } from './options.js';
import type {
  CommonQueueOptions,
  Handlers,
  KeyInfo,
  KeyStatus,
  OpInfo,
  OpInput,
  QueueEvents,
  ResultOf,
  RetentionOptions,
} from './types.js';

/** Options of {@link createQueue}. */
export type QueueOptions<H extends Handlers> = CommonQueueOptions<H>;

/** A per-key ordered queue. */
export interface Queue<H extends Handlers> extends AsyncDisposable {
  readonly backend: QueueBackend;
  readonly workerId: string;
  /** `'sync'` when ops run inline in `cast`/`call`. */
  readonly mode: 'async' | 'sync';
  /**
   * Enqueues `op` behind the key's earlier ops and resolves with its id once stored (durable on
   * a durable backend). In sync mode it resolves after the op finished (or was held/cancelled).
   */
  cast<T extends keyof H & string>(key: string, op: OpInput<H, T>): Promise<string>;
  /**
   * Enqueues `op` as `cast` does, then waits for its outcome: the handler's result, or a
   * `QueueError` (`async-queue.op_failed` with the handler's error as `cause`,
   * `async-queue.op_cancelled`). `signal`/`timeoutMs` end the wait, not the op.
   */
  call<T extends keyof H & string>(
    key: string,
    op: OpInput<H, T>,
    options?: WaitOptions,
  ): Promise<ResultOf<H, T>>;
  /** Waits for the outcome of an op enqueued earlier (same errors as `call`). */
  wait(id: string, options?: WaitOptions): Promise<unknown>;
  /** The op, while retained. */
  get(id: string): Promise<OpInfo | undefined>;
  keyStatus(key: string): Promise<KeyStatus>;
  /** Keys that are not idle — queued, `<type>-in-progress` or `blocked` — for dashboards. @default limit 1000 */
  activeKeys(options?: { limit?: number }): Promise<{ key: string; status: KeyStatus }[]>;
  /** The key's status, its running op and its pending ops in order. */
  inspect(key: string): Promise<KeyInfo>;
  /** Unblocks a `blocked` key: held ops run. False when it was not blocked. */
  resume(key: string): Promise<boolean>;
  /** Cancels the key's pending ops and unblocks it; returns the cancelled op ids. */
  discard(key: string): Promise<string[]>;
  /** Failed ops still retained, newest first. @default limit 100 */
  deadLetters(options?: { limit?: number }): Promise<OpInfo[]>;
  /** Applies `retention` now; returns how many finished ops were deleted. */
  prune(retention?: RetentionOptions): Promise<number>;
  /** Resolves when this instance has nothing running and nothing it could claim right now. */
  onIdle(options?: WaitOptions): Promise<void>;
  on<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void;
  once<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void;
  onAny(
    listener: <K extends keyof QueueEvents>(event: K, payload: QueueEvents[K]) => void,
  ): () => void;
  /**
   * Stops claiming; lets in-flight handlers finish for `closeGraceMs`, then aborts their signal
   * and gives unfinished ops back; rejects pending waits with `async-queue.closed`; closes the
   * backend. Idempotent.
   */
  close(): Promise<void>;
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** A claim this instance runs. */
class Inflight {
  #controller: AbortController | undefined;
  /** Set when close() gave up on the handler and released the op. */
  abandoned = false;
  closingAbort = false;
  /** Its completion claimed the next op, which took over its slot. */
  chained = false;
  done: Promise<void> = Promise.resolve();
  constructor(readonly claim: Claim) {}
  /** Created on first use (most handlers never look at their signal). */
  get controller(): AbortController {
    return (this.#controller ??= new AbortController());
  }
}

interface Waiter {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * Creates a queue. Ops with the same key run strictly one after the other in enqueue order;
 * different keys run in parallel up to `concurrency`, in round-robin order so that no key
 * starves the others. See the README for guarantees per backend.
 */
export function createQueue<H extends Handlers>(options: QueueOptions<H>): Queue<H> {
  return new QueueImpl(options);
}

class QueueImpl<H extends Handlers> implements Queue<H> {
  readonly backend: QueueBackend;
  readonly workerId: string;
  readonly mode: 'async' | 'sync';
  readonly #handlers: H;
  readonly #policy: NormalPolicy;
  readonly #concurrency: number;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #leaseMs: number;
  readonly #heartbeatMs: number;
  readonly #maxLeaseExpiries: number;
  readonly #closeGraceMs: number;
  readonly #retention: RetentionOptions | undefined;
  readonly #isWorker: boolean;
  readonly #events = new TypedEmitter<QueueEvents>();
  readonly #inflight = new Map<Claim, Inflight>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  /** Ops whose outcome a local handler run has not yet reported. */
  readonly #unsettled = new Set<string>();
  readonly #lastKeyStatus = new Map<string, KeyStatus>();
  readonly #stop = new AbortController();
  readonly #halt = new AbortController();
  readonly #attached: Promise<void>;
  #closed: Promise<void> | undefined;
  #isAttached = false;
  #rung = false;
  #bell: Deferred<void> | undefined;
  #idleWaiters: Deferred<void>[] = [];
  #lastClaimEmpty = false;
  #loop: Promise<void> | undefined;
  #timers: Promise<void>[] = [];
  /** Options of the claim chained to each completion (the same for every op). */
  #chain: Omit<ClaimOptions, 'limit' | 'key'> | undefined;
  /** The memory backend's promise-free hot methods, when that is the backend. */
  readonly #now: SyncMethods | undefined;

  constructor(options: QueueOptions<H>) {
    const resolved = resolveOptions(options);
    this.#handlers = resolved.handlers;
    this.mode = resolved.mode;
    this.#concurrency = resolved.concurrency;
    this.#policy = resolved.policy;
    this.#logger = resolved.logger;
    this.#clock = resolved.clock;
    this.#leaseMs = resolved.leaseMs;
    this.#heartbeatMs = resolved.heartbeatMs;
    this.#maxLeaseExpiries = resolved.maxLeaseExpiries;
    this.#closeGraceMs = resolved.closeGraceMs;
    this.#retention = resolved.retention;
    this.#isWorker = resolved.isWorker;
    this.workerId = resolved.workerId;
    this.backend = options.backend ?? memoryBackend();
    this.#now = syncMethods(this.backend);
    this.#attached = this.backend.attach({
      clock: this.#clock,
      logger: this.#logger,
      wake: () => this.#ring(),
      settled: (id) => this.#remoteSettled(id),
    });
    this.#attached.then(
      () => {
        this.#isAttached = true;
      },
      () => {},
    );
    this.#attached.catch((err: unknown) =>
      this.#logger.error({ err }, 'async-queue backend failed to attach'),
    );
    if (this.mode === 'async' && this.#isWorker && this.#concurrency > 0) {
      this.#loop = this.#runLoop();
      if (this.backend.durable) this.#timers.push(this.#heartbeatLoop());
    }
    if (this.backend.durable) this.#timers.push(this.#pollWaitersLoop());
    if (this.#retention) this.#timers.push(this.#retentionLoop(this.#retention));
  }

  // ---------------------------------------------------------------- public API

  on<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void {
    return this.#events.on(event, listener);
  }
  once<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void {
    return this.#events.once(event, listener);
  }
  onAny(
    listener: <K extends keyof QueueEvents>(event: K, payload: QueueEvents[K]) => void,
  ): () => void {
    return this.#events.onAny(listener);
  }

  async cast<T extends keyof H & string>(key: string, op: OpInput<H, T>): Promise<string> {
    // Memory backend, nobody listening for key statuses: stored at once, nothing to await.
    if (this.#now && this.mode === 'async' && !this.#events.hasListeners('key:status')) {
      const info = this.#stored(this.#now.enqueue(this.#input(key, op, false)));
      this.#ring();
      return info.id;
    }
    const info = await this.#enqueue(key, op);
    if (this.mode === 'sync') await this.#runInline(key, info.id);
    return info.id;
  }

  async call<T extends keyof H & string>(
    key: string,
    op: OpInput<H, T>,
    options: WaitOptions = {},
  ): Promise<ResultOf<H, T>> {
    timeoutOption('queue.call', options.timeoutMs);
    throwIfAborted(options.signal);
    const info = await this.#enqueue(key, op, true);
    const outcome = this.wait(info.id, options);
    if (this.mode === 'sync') {
      // The outcome is settled by the inline run (or later, by resume/discard when held).
      outcome.catch(() => {});
      await this.#runInline(key, info.id);
    }
    return (await outcome) as ResultOf<H, T>;
  }

  async wait(id: string, options: WaitOptions = {}): Promise<unknown> {
    timeoutOption('queue.wait', options.timeoutMs);
    throwIfAborted(options.signal);
    if (this.#closed) throw this.#closedError();
    const d = deferred<unknown>();
    // It may settle while the look-up below is in flight: not an unhandled rejection.
    d.promise.catch(() => {});
    const waiter: Waiter = { resolve: d.resolve, reject: d.reject };
    let set = this.#waiters.get(id);
    if (!set) this.#waiters.set(id, (set = new Set()));
    set.add(waiter);
    using scope = scopedSignal({
      ...options,
      onTimeout: () =>
        new QueueError(
          'async-queue.timeout',
          `op ${id} did not finish within ${options.timeoutMs} ms`,
          {
            details: { id },
          },
        ),
    });
    const onAbort = () => d.reject(scope.signal.reason);
    scope.signal.addEventListener('abort', onAbort, { once: true });
    try {
      // It may have finished already (fast handler, idempotent repeat, another process).
      const current = await this.backend.get(id);
      if (current && TERMINAL.has(current.status) && !this.#runningHere(id)) {
        this.#settleWaiters(current);
      }
      return await d.promise;
    } finally {
      scope.signal.removeEventListener('abort', onAbort);
      const s = this.#waiters.get(id);
      s?.delete(waiter);
      if (s?.size === 0) this.#waiters.delete(id);
    }
  }

  async get(id: string): Promise<OpInfo | undefined> {
    await this.#attached;
    return this.backend.get(id);
  }

  async keyStatus(key: string): Promise<KeyStatus> {
    await this.#attached;
    return this.backend.keyStatus(key);
  }

  async activeKeys(
    options: { limit?: number } = {},
  ): Promise<{ key: string; status: KeyStatus }[]> {
    const limit = nonNegativeIntegerOption('queue.activeKeys', 'limit', options.limit, 1000);
    await this.#attached;
    return this.backend.activeKeys(limit);
  }

  async inspect(key: string): Promise<KeyInfo> {
    await this.#attached;
    return this.backend.inspect(key);
  }

  async resume(key: string): Promise<boolean> {
    await this.#attached;
    const resumed = await this.backend.resume(key);
    if (resumed) {
      this.#events.emit('key:resumed', { key });
      await this.#emitKeyStatus(key);
      if (this.mode === 'sync') await this.#runInline(key, undefined);
      else this.#ring();
    }
    return resumed;
  }

  async discard(key: string): Promise<string[]> {
    await this.#attached;
    const cancelled = await this.backend.discard(key);
    for (const op of cancelled) {
      this.#events.emit('op:cancelled', { id: op.id, key, type: op.type, cause: 'discard' });
      this.#settleWaiters(op);
    }
    this.#events.emit('key:discarded', { key, cancelled: cancelled.map((o) => o.id) });
    await this.#emitKeyStatus(key);
    this.#ring();
    return cancelled.map((o) => o.id);
  }

  async deadLetters(options: { limit?: number } = {}): Promise<OpInfo[]> {
    const limit = nonNegativeIntegerOption('queue.deadLetters', 'limit', options.limit, 100);
    await this.#attached;
    return this.backend.deadLetters(limit);
  }

  async prune(retention: RetentionOptions | undefined = this.#retention): Promise<number> {
    if (retention !== undefined) checkRetention('queue.prune', retention);
    await this.#attached;
    return this.backend.prune(retention ?? {});
  }

  async onIdle(options: WaitOptions = {}): Promise<void> {
    timeoutOption('queue.onIdle', options.timeoutMs);
    throwIfAborted(options.signal);
    if (this.#isIdle()) return;
    const d = deferred<void>();
    this.#idleWaiters.push(d);
    this.#ring();
    await this.#raceWait(d.promise, options);
  }

  close(): Promise<void> {
    this.#closed ??= this.#doClose();
    return this.#closed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---------------------------------------------------------------- enqueue

  /** Checks an op to enqueue (throws before anything is stored) and makes its backend input. */
  #input(key: string, op: OpInput<H>, waited: boolean): EnqueueInput {
    if (this.#closed) throw this.#closedError();
    if (typeof key !== 'string' || key.length === 0) {
      throw new TypeError(`key must be a non-empty string, got ${JSON.stringify(key)}`);
    }
    if (typeof op !== 'object' || op === null || typeof op.type !== 'string') {
      throw new TypeError(`op must be { type, payload }, got ${String(op)}`);
    }
    if (!Object.hasOwn(this.#handlers, op.type)) {
      throw new QueueError(
        'async-queue.unknown_type',
        `no handler for op type '${op.type}' (known: ${Object.keys(this.#handlers).join(', ') || 'none'})`,
        { details: { type: op.type } },
      );
    }
    if (op.idempotencyKey !== undefined && typeof op.idempotencyKey !== 'string') {
      throw new TypeError(`idempotencyKey must be a string, got ${String(op.idempotencyKey)}`);
    }
    if (this.backend.durable) {
      const why = explainNotJson(op.payload ?? null, '$.payload');
      if (why) {
        throw new QueueError(
          'async-queue.not_json',
          `payload of op '${op.type}' is not JSON: ${why}`,
        );
      }
    }
    return {
      key,
      type: op.type,
      payload: op.payload,
      idempotencyKey: op.idempotencyKey,
      waited,
    };
  }

  /** Reports a stored op (`op:queued`). */
  #stored(out: { op: OpInfo; created: boolean }): OpInfo {
    const { op: info, created } = out;
    if (this.#events.hasListeners('op:queued')) {
      this.#events.emit('op:queued', {
        id: info.id,
        key: info.key,
        type: info.type,
        deduplicated: !created,
        held: info.held === true,
      });
    }
    return info;
  }

  async #enqueue(key: string, op: OpInput<H>, waited = false): Promise<OpInfo> {
    const input = this.#input(key, op, waited);
    // The memory backend stores at once (and needs no attach to finish): call order is kept.
    let out: { op: OpInfo; created: boolean };
    if (this.#now) out = this.#now.enqueue(input);
    else {
      if (!this.#isAttached) await this.#attached;
      out = await this.backend.enqueue(input);
    }
    const info = this.#stored(out);
    if (out.created) {
      const status = this.#emitKeyStatus(key);
      if (status) await status;
    }
    this.#ring();
    return info;
  }

  // ---------------------------------------------------------------- worker loop

  #ring(): void {
    this.#rung = true;
    const bell = this.#bell;
    this.#bell = undefined;
    bell?.resolve();
  }

  #isIdle(): boolean {
    return (
      this.#inflight.size === 0 && (this.mode === 'sync' || !this.#loop || this.#lastClaimEmpty)
    );
  }

  #checkIdle(): void {
    if (this.#idleWaiters.length === 0 || !this.#isIdle()) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w.resolve();
  }

  async #runLoop(): Promise<void> {
    try {
      await this.#attached;
    } catch {
      return;
    }
    let errors = 0;
    while (!this.#stop.signal.aborted) {
      this.#rung = false;
      const free = this.#concurrency - this.#inflight.size;
      let claimed = 0;
      if (free > 0) {
        try {
          const { claims, poisoned } = await this.backend.claim({
            limit: free,
            leaseMs: this.#leaseMs,
            workerId: this.workerId,
            maxLeaseExpiries: this.#maxLeaseExpiries,
            stopOnPoison: this.#policy.onFailure === 'stop',
          });
          errors = 0;
          for (const p of poisoned) await this.#reportFailure(p, undefined);
          if (this.#stop.signal.aborted) {
            for (const c of claims) await this.backend.release(c).catch(() => false);
            break;
          }
          for (const c of claims) this.#start(c);
          claimed = claims.length;
          this.#lastClaimEmpty = claimed === 0;
        } catch (err) {
          errors++;
          this.#logger.warn({ err }, 'async-queue claim failed; retrying');
          await this.#clock
            .sleep(Math.min(5000, 50 * 2 ** Math.min(errors, 7)), { signal: this.#stop.signal })
            .catch(() => {});
          continue;
        }
        this.#checkIdle();
        if (claimed === free) continue;
      }
      if (this.#rung) continue;
      await this.#idleWait(free > 0);
    }
  }

  async #idleWait(canClaim: boolean): Promise<void> {
    let timeout: number | undefined;
    if (canClaim) {
      const due = await this.backend.nextDueAt().catch(() => undefined);
      if (this.#rung) return;
      if (due !== undefined) timeout = Math.max(0, due - this.#clock.now());
      if (this.backend.durable) {
        const poll = this.backend.pollMs > 0 ? this.backend.pollMs : this.#leaseMs / 2;
        timeout = timeout === undefined ? poll : Math.min(timeout, poll);
      }
    }
    if (this.#rung || this.#stop.signal.aborted) return;
    // close() rings the bell after aborting #stop, so the bell alone ends the wait.
    const bell = (this.#bell = deferred<void>());
    if (timeout === undefined) {
      await bell.promise;
      return;
    }
    const controller = new AbortController();
    try {
      await Promise.race([
        bell.promise,
        this.#clock.sleep(timeout, { signal: controller.signal }).catch(() => {}),
      ]);
    } finally {
      controller.abort();
      if (this.#bell === bell) this.#bell = undefined;
    }
  }

  #start(claim: Claim): void {
    const entry = new Inflight(claim);
    this.#inflight.set(claim, entry);
    entry.done = this.#runClaim(entry);
  }

  /** Runs a claim of the worker loop; never rejects. */
  async #runClaim(entry: Inflight): Promise<void> {
    const { claim } = entry;
    this.#unsettled.add(claim.op.id);
    try {
      await this.#executeClaim(entry);
    } catch (err) {
      this.#logger.error({ err, id: claim.op.id }, 'async-queue settle failed');
    } finally {
      this.#unsettled.delete(claim.op.id);
      this.#inflight.delete(claim);
      // A completion that claimed the next op handed its slot over: nothing for the loop to do.
      if (!entry.chained) this.#ring();
      this.#checkIdle();
    }
  }

  async #execute(entry: Inflight): Promise<void> {
    this.#unsettled.add(entry.claim.op.id);
    try {
      await this.#executeClaim(entry);
    } finally {
      this.#unsettled.delete(entry.claim.op.id);
    }
  }

  async #executeClaim(entry: Inflight): Promise<void> {
    const { op } = entry.claim;
    if (this.#events.hasListeners('op:started')) {
      this.#events.emit('op:started', {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        workerId: this.workerId,
      });
    }
    void this.#emitKeyStatus(op.key);
    const started = this.#clock.now();
    let ok = false;
    let result: unknown;
    let error: unknown;
    try {
      const handler = this.#handlers[op.type];
      if (!handler) {
        throw new QueueError(
          'async-queue.unknown_type',
          `this worker has no handler for op type '${op.type}'`,
          { details: { type: op.type } },
        );
      }
      result = await handler(op.payload, {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        get signal() {
          return entry.controller.signal;
        },
      });
      ok = true;
      if (this.backend.durable) {
        result ??= null;
        const why = explainNotJson(result, '$.result');
        if (why) {
          ok = false;
          error = new QueueError(
            'async-queue.not_json',
            `result of op '${op.type}' is not JSON: ${why}`,
          );
        }
      }
    } catch (err) {
      error = err;
    }
    if (entry.abandoned) return;
    if (ok) {
      const chain =
        this.#loop !== undefined && !this.#stop.signal.aborted
          ? (this.#chain ??= {
              leaseMs: this.#leaseMs,
              workerId: this.workerId,
              maxLeaseExpiries: this.#maxLeaseExpiries,
              stopOnPoison: this.#policy.onFailure === 'stop',
            })
          : undefined;
      const c = this.#now
        ? this.#now.succeed(entry.claim, result, chain)
        : await this.#record(entry, () => this.backend.succeed(entry.claim, result, chain));
      if (!c) return this.#refused(entry.claim);
      const { next } = c;
      if (next) {
        if (next.poisoned.length === 0 && !this.#stop.signal.aborted) {
          for (const claim of next.claims) this.#start(claim);
        } else await this.#adopt(next);
        entry.chained = next.claims.length > 0 && !this.#stop.signal.aborted;
      }
      if (this.#events.hasListeners('op:succeeded')) {
        this.#events.emit('op:succeeded', {
          id: op.id,
          key: op.key,
          type: op.type,
          attempt: op.attempts,
          result,
          durationMs: this.#clock.now() - started,
        });
      }
      const status = this.#emitKeyStatus(op.key);
      if (status) await status;
      this.#settleWaiters(c.op, undefined, result);
      return;
    }
    if (entry.closingAbort) {
      // Closing aborted the handler: give the op back instead of counting a failure.
      if (await this.backend.release(entry.claim)) {
        this.#events.emit('op:released', { id: op.id, key: op.key, type: op.type });
      } else this.#refused(entry.claim);
      return;
    }
    const serialized = serializeError(error);
    if (op.attempts < this.#policy.maxAttempts) {
      const retryAt = this.#clock.now() + this.#policy.backoff(op.attempts);
      const c = await this.#record(entry, () =>
        this.backend.fail(entry.claim, serialized, { retryAt }),
      );
      if (!c) return this.#refused(entry.claim);
      this.#events.emit('op:retrying', {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        error: serialized,
        retryAt,
      });
      await this.#emitKeyStatus(op.key);
      return;
    }
    const c = await this.#record(entry, () =>
      this.backend.fail(entry.claim, serialized, { stop: this.#policy.onFailure === 'stop' }),
    );
    if (!c) return this.#refused(entry.claim);
    await this.#reportFailure(c, error);
  }

  /**
   * Records an op's outcome, retrying a write that failed (the database restarting, a deadlock,
   * a dropped connection) for up to one lease: the entry stays in flight meanwhile, so its lease
   * is still renewed and its slot is not given to another op. Giving up leaves the op claimed;
   * it runs again elsewhere once the lease expires (at-least-once). A retried write that had in
   * fact been committed is refused by the fencing token, never applied twice.
   */
  async #record<T>(entry: Inflight, write: () => Promise<T>): Promise<T> {
    const until = this.#clock.now() + this.#leaseMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (err) {
        const wait = Math.min(1000, 25 * 2 ** attempt);
        const give = !this.backend.durable || this.#halt.signal.aborted;
        if (give || this.#clock.now() + wait >= until) throw err;
        this.#logger.warn(
          { err, id: entry.claim.op.id, attempt },
          'async-queue could not record an outcome; retrying',
        );
        await this.#clock.sleep(wait, { signal: this.#halt.signal }).catch(() => {});
      }
    }
  }

  /** Starts ops claimed along with a completion (they take the finishing op's slot). */
  async #adopt(next: { claims: Claim[]; poisoned: Completion[] }): Promise<void> {
    for (const p of next.poisoned) await this.#reportFailure(p, undefined);
    for (const claim of next.claims) {
      if (this.#stop.signal.aborted) {
        if (await this.backend.release(claim).catch(() => false)) {
          this.#events.emit('op:released', {
            id: claim.op.id,
            key: claim.op.key,
            type: claim.op.type,
          });
        }
      } else this.#start(claim);
    }
  }

  async #reportFailure(c: Completion, localError: unknown): Promise<void> {
    const { op } = c;
    const error = op.error ?? serializeError(localError);
    this.#events.emit('op:failed', {
      id: op.id,
      key: op.key,
      type: op.type,
      attempt: op.attempts,
      error,
    });
    for (const x of c.cancelled) {
      this.#events.emit('op:cancelled', { id: x.id, key: x.key, type: x.type, cause: op.id });
    }
    if (c.blocked) this.#events.emit('key:blocked', { key: op.key, opId: op.id, error });
    await this.#emitKeyStatus(op.key);
    this.#settleWaiters(op, localError);
    for (const x of c.cancelled) this.#settleWaiters(x);
  }

  #refused(claim: Claim): void {
    const { op } = claim;
    this.#logger.warn(
      { id: op.id, key: op.key, attempt: op.attempts },
      'async-queue completion refused: the claim is stale (lease expired)',
    );
    this.#events.emit('op:refused', {
      id: op.id,
      key: op.key,
      type: op.type,
      attempt: op.attempts,
    });
  }

  #emitKeyStatus(key: string): Promise<void> | undefined {
    if (!this.#events.hasListeners('key:status')) return undefined;
    return this.#doEmitKeyStatus(key);
  }

  async #doEmitKeyStatus(key: string): Promise<void> {
    let status: KeyStatus;
    try {
      status = await this.backend.keyStatus(key);
    } catch {
      return;
    }
    if (this.#lastKeyStatus.get(key) === status) return;
    if (status === 'idle') this.#lastKeyStatus.delete(key);
    else this.#lastKeyStatus.set(key, status);
    this.#events.emit('key:status', { key, status });
  }

  // ---------------------------------------------------------------- sync mode

  /** Runs the key's ops inline until `id` is finished (or, without id, until none is runnable). */
  async #runInline(key: string, id: string | undefined): Promise<void> {
    for (;;) {
      if (this.#stop.signal.aborted) return;
      if (id !== undefined) {
        const current = await this.backend.get(id);
        if (!current || TERMINAL.has(current.status)) return;
      }
      const { claims, poisoned } = await this.backend.claim({
        limit: 1,
        leaseMs: this.#leaseMs,
        workerId: this.workerId,
        key,
        maxLeaseExpiries: this.#maxLeaseExpiries,
        stopOnPoison: this.#policy.onFailure === 'stop',
      });
      for (const p of poisoned) await this.#reportFailure(p, undefined);
      const claim = claims[0];
      if (claim) {
        const entry = new Inflight(claim);
        this.#inflight.set(claim, entry);
        try {
          entry.done = this.#execute(entry);
          await entry.done;
        } finally {
          this.#inflight.delete(claim);
          this.#ring();
        }
        continue;
      }
      const info = await this.backend.inspect(key);
      if (info.status === 'blocked' || (!info.running && info.pending.length === 0)) return;
      // Running inline elsewhere in this process, or waiting for a retry: wait and look again.
      let timeout = 50;
      const due = await this.backend.nextDueAt();
      if (!info.running && due !== undefined) timeout = Math.max(0, due - this.#clock.now());
      this.#rung = false;
      const bell = (this.#bell = deferred<void>());
      const controller = new AbortController();
      await Promise.race([
        bell.promise,
        this.#clock.sleep(timeout, { signal: controller.signal }).catch(() => {}),
      ]);
      controller.abort();
    }
  }

  // ---------------------------------------------------------------- waiters

  #settleWaiters(op: OpInfo, localError?: unknown, localResult?: unknown): void {
    if (TERMINAL.has(op.status)) this.#unsettled.delete(op.id);
    const set = this.#waiters.get(op.id);
    if (!set || !TERMINAL.has(op.status)) return;
    this.#waiters.delete(op.id);
    for (const w of set) {
      if (op.status === 'succeeded') {
        w.resolve(localResult !== undefined ? localResult : op.result);
      } else if (op.status === 'failed') {
        w.reject(
          new QueueError(
            'async-queue.op_failed',
            `op ${op.id} (${op.type} on '${op.key}') failed after ${op.attempts} attempt(s): ${op.error?.message ?? 'unknown error'}`,
            {
              cause: localError ?? op.error,
              details: { id: op.id, key: op.key, type: op.type, attempts: op.attempts },
            },
          ),
        );
      } else {
        w.reject(
          new QueueError(
            'async-queue.op_cancelled',
            op.cancelledBy === 'discard'
              ? `op ${op.id} (${op.type} on '${op.key}') was discarded`
              : `op ${op.id} (${op.type} on '${op.key}') was cancelled because op ${op.cancelledBy ?? '?'} failed before it`,
            {
              details: {
                id: op.id,
                key: op.key,
                type: op.type,
                cancelledBy: op.cancelledBy ?? null,
              },
            },
          ),
        );
      }
    }
  }

  /** True while a local handler runs (or settles) `id`: it settles the waiters itself. */
  #runningHere(id: string): boolean {
    return this.#unsettled.has(id);
  }

  #remoteSettled(id: string): void {
    if (!this.#waiters.has(id) || this.#runningHere(id)) return;
    this.backend.get(id).then(
      (op) => {
        if (op) this.#settleWaiters(op);
      },
      () => {},
    );
  }

  async #pollWaitersLoop(): Promise<void> {
    const every = this.backend.pollMs > 0 ? this.backend.pollMs : 1000;
    while (!this.#stop.signal.aborted) {
      await this.#clock.sleep(every, { signal: this.#stop.signal }).catch(() => {});
      if (this.#stop.signal.aborted) return;
      for (const id of [...this.#waiters.keys()]) {
        if (this.#runningHere(id)) continue;
        const op = await this.backend.get(id).catch(() => undefined);
        if (op) this.#settleWaiters(op);
      }
    }
  }

  async #heartbeatLoop(): Promise<void> {
    // Keeps leases alive until close() is done with in-flight handlers (#halt), not just #stop.
    while (!this.#halt.signal.aborted) {
      await this.#clock.sleep(this.#heartbeatMs, { signal: this.#halt.signal }).catch(() => {});
      if (this.#halt.signal.aborted) return;
      const entries = [...this.#inflight.values()].filter((e) => !e.abandoned);
      if (entries.length === 0) continue;
      try {
        const lost = await this.backend.heartbeat(
          entries.map((e) => e.claim),
          this.#leaseMs,
        );
        for (const e of entries) {
          if (lost.has(e.claim) && !e.controller.signal.aborted) {
            e.controller.abort(
              new QueueError(
                'async-queue.lease_lost',
                `the claim on op ${e.claim.op.id} was lost; it may run elsewhere`,
                { details: { id: e.claim.op.id } },
              ),
            );
          }
        }
      } catch (err) {
        this.#logger.warn({ err }, 'async-queue heartbeat failed');
      }
    }
  }

  async #retentionLoop(retention: RetentionOptions): Promise<void> {
    const every = Math.min(60_000, Math.max(1000, (retention.maxAgeMs ?? 60_000) / 10));
    while (!this.#stop.signal.aborted) {
      await this.#clock.sleep(every, { signal: this.#stop.signal }).catch(() => {});
      if (this.#stop.signal.aborted) return;
      await this.backend
        .prune(retention)
        .catch((err: unknown) => this.#logger.warn({ err }, 'async-queue prune failed'));
    }
  }

  // ---------------------------------------------------------------- close

  #closedError(): QueueError {
    return new QueueError('async-queue.closed', 'the queue is closed');
  }

  async #raceWait<T>(promise: Promise<T>, options: WaitOptions): Promise<T> {
    using scope = scopedSignal({
      ...options,
      onTimeout: () =>
        new QueueError(
          'async-queue.timeout',
          `the queue did not become idle within ${options.timeoutMs} ms`,
        ),
    });
    return await new Promise<T>((resolve, reject) => {
      const onAbort = () => reject(scope.signal.reason);
      if (scope.signal.aborted) return onAbort();
      scope.signal.addEventListener('abort', onAbort, { once: true });
      promise
        .then(resolve, reject)
        .finally(() => scope.signal.removeEventListener('abort', onAbort));
    });
  }

  async #doClose(): Promise<void> {
    this.#stop.abort(this.#closedError());
    this.#ring();
    await this.#loop;
    const pending = () => Promise.allSettled([...this.#inflight.values()].map((e) => e.done));
    if (this.#inflight.size > 0) {
      const grace = new AbortController();
      await Promise.race([
        pending(),
        this.#clock.sleep(this.#closeGraceMs, { signal: grace.signal }).catch(() => {}),
      ]);
      grace.abort();
    }
    if (this.#inflight.size > 0) {
      for (const e of this.#inflight.values()) {
        e.closingAbort = true;
        e.controller.abort(
          new QueueError('async-queue.closed', 'the queue is closing; stop and give the op back'),
        );
      }
      const grace = new AbortController();
      await Promise.race([
        pending(),
        this.#clock.sleep(1000, { signal: grace.signal }).catch(() => {}),
      ]);
      grace.abort();
      for (const e of [...this.#inflight.values()]) {
        e.abandoned = true;
        if (await this.backend.release(e.claim).catch(() => false)) {
          const { op } = e.claim;
          this.#events.emit('op:released', { id: op.id, key: op.key, type: op.type });
        }
        this.#inflight.delete(e.claim);
      }
    }
    for (const set of this.#waiters.values()) {
      for (const w of set) w.reject(this.#closedError());
    }
    this.#waiters.clear();
    for (const d of this.#idleWaiters) d.resolve();
    this.#idleWaiters = [];
    this.#halt.abort();
    await Promise.allSettled(this.#timers);
    await this.#attached.catch(() => {});
    await this.backend.close();
  }
}

export type { SerializedError };
