import {
  deferred,
  explainNotJson,
  nonNegativeIntegerOption,
  nonNegativeOption,
  raceAbort,
  scopedSignal,
  throwIfAborted,
  timeoutOption,
  type Listener,
  type SerializedError,
  type TypedEmitter,
  type WaitOptions,
} from '@rigging/core';
import type { EnqueueInput, QueueBackend } from './backend.js';
import { QueueError } from './errors.js';
import { memoryBackend } from './memory.js';
import { checkRetention, resolveOptions, type ResolvedOptions } from './options.js';
import { Reporter } from './status.js';
import type {
  CommonQueueOptions,
  GetOptions,
  Handlers,
  HandlersOf,
  OpTypes,
  ProducerQueueOptions,
  KeyInfo,
  KeyStatus,
  OpInfo,
  OpInput,
  QueueEvents,
  ResultOf,
  RetentionOptions,
} from './types.js';
import { Waiters } from './waiters.js';
import { Worker } from './worker.js';

/** Options of {@link createQueue}. */
export type QueueOptions<H extends Handlers> = CommonQueueOptions<H>;

/** A per-key ordered queue. */
export interface Queue<H extends Handlers> extends AsyncDisposable {
  /** Where ops are stored (the `backend` option, or a fresh memory backend). */
  readonly backend: QueueBackend;
  /** This instance's name in claims and events (the `workerId` option, or `<hostname>:<pid>:<random>`). */
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
  /**
   * The op, while retained. With `waitMs`, a long poll: resolves once the op has ended
   * (succeeded, failed or cancelled) or as it is after `waitMs`, whichever comes first; `signal`
   * ends the wait (rejecting with its reason). An end in another process is seen at once when
   * the op was cast with `announce` (or by `call`), else at the next poll (`pollMs`).
   */
  get(id: string, options?: GetOptions): Promise<OpInfo | undefined>;
  /** The key's status now (`idle` when it has nothing pending). */
  keyStatus(key: string): Promise<KeyStatus>;
  /** Keys that are not idle — queued, `<type>-in-progress` or `blocked` — for dashboards. @default limit 1000 */
  activeKeys(options?: { limit?: number }): Promise<
    {
      /** The key. */
      key: string;
      /** Its status now. */
      status: KeyStatus;
    }[]
  >;
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
  /**
   * Resolves when this instance has nothing running and nothing it could claim right now.
   * `timeoutMs` rejects with `async-queue.timeout`; `signal` with its reason.
   */
  onIdle(options?: WaitOptions): Promise<void>;
  /**
   * Resolves when `key` (or, without a key, the whole queue — every process sharing the board)
   * has no pending and no running op: every op stored so far finished. Ops held by a blocked key
   * are pending: a blocked key with held ops is not drained (a blocked key without any is).
   * Looks again on each of this instance's events and every `pollMs` (durable backends) or 50 ms.
   * `timeoutMs` rejects with `async-queue.timeout`; `signal` with its reason.
   */
  drained(key?: string, options?: WaitOptions): Promise<void>;
  /** Subscribes to `event`; returns the function that unsubscribes. */
  on<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void;
  /** Subscribes to the next `event` only; returns the function that unsubscribes. */
  once<K extends keyof QueueEvents>(event: K, listener: Listener<QueueEvents[K]>): () => void;
  /** Subscribes to every event (name and payload); returns the function that unsubscribes. */
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

/**
 * Creates a queue. Ops with the same key run strictly one after the other in enqueue order;
 * different keys run in parallel up to `concurrency`, in round-robin order so that no key
 * starves the others. See the README for guarantees per backend.
 */
export function createQueue<T extends OpTypes>(
  options: ProducerQueueOptions<T>,
): Queue<HandlersOf<T>>;
export function createQueue<H extends Handlers>(options: QueueOptions<H>): Queue<H>;
export function createQueue<H extends Handlers>(
  options: QueueOptions<H> | ProducerQueueOptions<OpTypes>,
): Queue<H> {
  return new QueueImpl(options as QueueOptions<H>);
}

const closedError = () => new QueueError('async-queue.closed', 'the queue is closed');

class QueueImpl<H extends Handlers> implements Queue<H> {
  readonly backend: QueueBackend;
  readonly workerId: string;
  readonly mode: 'async' | 'sync';
  readonly #options: ResolvedOptions<H>;
  readonly #waiters: Waiters;
  readonly #reporter: Reporter;
  readonly #worker: Worker<H>;
  readonly #events: TypedEmitter<QueueEvents>;
  readonly #attached: Promise<void>;
  #closed: Promise<void> | undefined;
  #isAttached = false;
  /** Enqueues waiting for `attach` to resolve (`enqueueNow` is not asked meanwhile). */
  #waitingForAttach = 0;
  /** Background loops (heartbeats, waiter polls, retention) that close() waits for. */
  readonly #timers: Promise<void>[] = [];

  constructor(options: QueueOptions<H>) {
    const resolved = (this.#options = resolveOptions(options));
    this.mode = resolved.mode;
    this.workerId = resolved.workerId;
    const backend = (this.backend = options.backend ?? memoryBackend());
    this.#waiters = new Waiters(backend);
    this.#reporter = new Reporter(backend, resolved.logger, this.#waiters);
    this.#events = this.#reporter.events;
    // The backend may wake the worker as soon as it is attached, before the worker is built.
    let worker: Worker<H> | undefined;
    this.#attached = backend.attach({
      clock: resolved.clock,
      logger: resolved.logger,
      wake: () => worker?.wake(),
      settled: (id) => this.#waiters.remoteSettled(id),
      claims: resolved.isWorker,
    });
    this.#attached.then(
      () => {
        this.#isAttached = true;
      },
      (err: unknown) => resolved.logger.error({ err }, 'async-queue backend failed to attach'),
    );
    this.#worker = worker = new Worker({
      backend,
      workerId: this.workerId,
      options: resolved,
      reporter: this.#reporter,
      waiters: this.#waiters,
      attached: this.#attached,
    });
    const stop = this.#worker.stop.signal;
    if (this.mode === 'async' && resolved.isWorker && resolved.concurrency > 0) {
      this.#worker.startLoop();
      if (backend.durable) this.#timers.push(this.#worker.heartbeatLoop());
    }
    if (backend.durable) {
      const every = backend.pollMs > 0 ? backend.pollMs : 1000;
      this.#timers.push(this.#waiters.pollLoop(every, resolved.clock, stop));
    }
    if (resolved.retention) this.#timers.push(this.#retentionLoop(resolved.retention, stop));
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

  cast<T extends keyof H & string>(key: string, op: OpInput<H, T>): Promise<string> {
    // Not an async function: when the backend stores at once (`enqueueNow`), nothing of this
    // call stays pending, however many ops a producer casts in one turn.
    let stored: OpInfo | Promise<OpInfo>;
    try {
      stored = this.#enqueue(key, op as OpInput<H>, false);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.mode === 'sync') return this.#castInline(key, stored);
    return stored instanceof Promise ? stored.then((info) => info.id) : Promise.resolve(stored.id);
  }

  async #castInline(key: string, stored: OpInfo | Promise<OpInfo>): Promise<string> {
    const info = await stored;
    await this.#worker.runInline(key, info.id);
    return info.id;
  }

  async call<T extends keyof H & string>(
    key: string,
    op: OpInput<H, T>,
    options: WaitOptions = {},
  ): Promise<ResultOf<H, T>> {
    timeoutOption('queue.call', options.timeoutMs);
    throwIfAborted(options.signal);
    const stored = this.#enqueue(key, op, true);
    const info = stored instanceof Promise ? await stored : stored;
    const outcome = this.wait(info.id, options);
    if (this.mode === 'sync') {
      // The outcome is settled by the inline run (or later, by resume/discard when held).
      outcome.catch(() => {});
      await this.#worker.runInline(key, info.id);
    }
    return (await outcome) as ResultOf<H, T>;
  }

  async wait(id: string, options: WaitOptions = {}): Promise<unknown> {
    timeoutOption('queue.wait', options.timeoutMs);
    throwIfAborted(options.signal);
    if (this.#closed) throw closedError();
    return this.#waiters.wait(id, options);
  }

  async get(id: string, options: GetOptions = {}): Promise<OpInfo | undefined> {
    const waitMs = nonNegativeOption('queue.get', 'waitMs', options.waitMs);
    const { signal } = options;
    throwIfAborted(signal);
    await this.#attached;
    if (!waitMs) return this.backend.get(id);
    if (this.#closed) throw closedError();
    return this.#waiters.ended(id, waitMs, signal);
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
      await this.#reporter.keyStatus(key);
      if (this.mode === 'sync') await this.#worker.runInline(key, undefined);
      else this.#worker.ring();
    }
    return resumed;
  }

  async discard(key: string): Promise<string[]> {
    await this.#attached;
    const cancelled = await this.backend.discard(key);
    for (const op of cancelled) {
      this.#events.emit('op:cancelled', { id: op.id, key, type: op.type, cause: 'discard' });
      this.#waiters.settle(op);
    }
    this.#events.emit('key:discarded', { key, cancelled: cancelled.map((o) => o.id) });
    await this.#reporter.keyStatus(key);
    this.#worker.ring();
    return cancelled.map((o) => o.id);
  }

  async deadLetters(options: { limit?: number } = {}): Promise<OpInfo[]> {
    const limit = nonNegativeIntegerOption('queue.deadLetters', 'limit', options.limit, 100);
    await this.#attached;
    return this.backend.deadLetters(limit);
  }

  async prune(retention: RetentionOptions | undefined = this.#options.retention): Promise<number> {
    if (retention !== undefined) checkRetention('queue.prune', retention);
    await this.#attached;
    return this.backend.prune(retention ?? {});
  }

  async onIdle(options: WaitOptions = {}): Promise<void> {
    timeoutOption('queue.onIdle', options.timeoutMs);
    throwIfAborted(options.signal);
    if (this.#worker.isIdle()) return;
    using scope = scopedSignal({
      ...options,
      onTimeout: () =>
        new QueueError(
          'async-queue.timeout',
          `the queue did not become idle within ${options.timeoutMs} ms`,
        ),
    });
    await raceAbort(this.#worker.idle(), scope.signal);
  }

  async drained(key?: string, options: WaitOptions = {}): Promise<void> {
    if (key !== undefined && (typeof key !== 'string' || key.length === 0)) {
      throw new TypeError(
        `queue.drained: key must be a non-empty string, got ${JSON.stringify(key)}`,
      );
    }
    timeoutOption('queue.drained', options.timeoutMs);
    throwIfAborted(options.signal);
    await this.#attached;
    if (await this.#isDrained(key)) return;
    using scope = scopedSignal({
      ...options,
      onTimeout: () =>
        new QueueError(
          'async-queue.timeout',
          `${key === undefined ? 'the queue' : `key '${key}'`} did not drain within ${options.timeoutMs} ms`,
        ),
    });
    const { signal } = scope;
    const every = this.backend.durable && this.backend.pollMs > 0 ? this.backend.pollMs : 50;
    let bell = deferred<void>();
    const off = this.#events.onAny(() => bell.resolve());
    try {
      for (;;) {
        const wake = new AbortController();
        await raceAbort(
          Promise.race([
            bell.promise,
            this.#options.clock.sleep(every, { signal: wake.signal }).catch(() => {}),
          ]),
          signal,
        ).finally(() => wake.abort());
        bell = deferred<void>();
        if (await this.#isDrained(key)) return;
      }
    } finally {
      off();
    }
  }

  /** No pending or running op on `key` (or on any key). */
  async #isDrained(key: string | undefined): Promise<boolean> {
    const idle = (info: KeyInfo) => !info.running && info.pending.length === 0;
    if (key !== undefined) return idle(await this.backend.inspect(key));
    for (const k of await this.backend.activeKeys(1000)) {
      if (k.status !== 'blocked') return false;
      if (!idle(await this.backend.inspect(k.key))) return false;
    }
    return true;
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
    if (this.#closed) throw closedError();
    if (typeof key !== 'string' || key.length === 0) {
      throw new TypeError(`key must be a non-empty string, got ${JSON.stringify(key)}`);
    }
    if (typeof op !== 'object' || op === null || typeof op.type !== 'string') {
      throw new TypeError(`op must be { type, payload }, got ${String(op)}`);
    }
    const { handlers, knownTypes } = this.#options;
    const known =
      knownTypes === undefined
        ? Object.hasOwn(handlers, op.type)
        : knownTypes === 'any' || knownTypes.has(op.type);
    if (!known) {
      throw new QueueError(
        'async-queue.unknown_type',
        `no handler for op type '${op.type}' (known: ${Object.keys(handlers).join(', ') || 'none'})`,
        { details: { type: op.type } },
      );
    }
    if (op.announce !== undefined && typeof op.announce !== 'boolean') {
      throw new TypeError(`announce must be a boolean, got ${String(op.announce)}`);
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
      waited: waited || op.announce === true,
    };
  }

  /**
   * Stores an op: at once when the backend's `enqueueNow` accepts it, else through `enqueue`.
   * Throws (synchronously) what `#input` refuses and what `enqueueNow` throws.
   */
  #enqueue(key: string, op: OpInput<H>, waited: boolean): OpInfo | Promise<OpInfo> {
    const input = this.#input(key, op, waited);
    // Call order is kept: `enqueueNow` is not asked while an earlier enqueue waits for attach.
    if (this.#waitingForAttach === 0 && this.backend.enqueueNow) {
      const out = this.backend.enqueueNow(input);
      if (out) return this.#stored(key, out);
    }
    return this.#enqueueLater(input);
  }

  async #enqueueLater(input: EnqueueInput): Promise<OpInfo> {
    // Each enqueue reaches the backend in the turn it was called in once attached (and, before
    // that, attach resolves its waiters in call order).
    if (!this.#isAttached) {
      this.#waitingForAttach++;
      try {
        await this.#attached;
      } finally {
        this.#waitingForAttach--;
      }
    }
    return this.#stored(input.key, await this.backend.enqueue(input));
  }

  /** Reports a stored op (`op:queued`, `key:status`) and wakes the worker. */
  #stored(key: string, out: { op: OpInfo; created: boolean }): OpInfo | Promise<OpInfo> {
    const info = this.#reporter.stored(out);
    const status = out.created ? this.#reporter.keyStatus(key) : undefined;
    if (status) {
      return status.then(() => {
        this.#worker.ring();
        return info;
      });
    }
    this.#worker.ring();
    return info;
  }

  // ---------------------------------------------------------------- background and close

  async #retentionLoop(retention: RetentionOptions, signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#options;
    const every = Math.min(60_000, Math.max(1000, (retention.maxAgeMs ?? 60_000) / 10));
    while (!signal.aborted) {
      await clock.sleep(every, { signal }).catch(() => {});
      if (signal.aborted) return;
      await this.backend
        .prune(retention)
        .catch((err: unknown) => logger.warn({ err }, 'async-queue prune failed'));
    }
  }

  async #doClose(): Promise<void> {
    await this.#worker.drain(closedError);
    this.#waiters.rejectAll(closedError);
    this.#worker.finish();
    await Promise.allSettled(this.#timers);
    await this.#attached.catch(() => {});
    await this.backend.close();
  }
}

export type { SerializedError };
