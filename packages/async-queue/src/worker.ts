// The part of a queue that runs ops: the claim loop, the ops in flight (handler, outcome,
// heartbeats), the inline runs of sync mode, and handing ops back on close.
import { deferred, explainNotJson, serializeError, type Deferred } from '@rigging/core';
import type { Claim, ClaimOptions, Completion, QueueBackend } from './backend.js';
import { QueueError } from './errors.js';
import { heartbeatLoop } from './heartbeats.js';
import type { ResolvedOptions } from './options.js';
import type { Reporter } from './status.js';
import type { Handlers } from './types.js';
import { DeferredWake } from './deferred-wake.js';
import { Inflight, OpContext } from './op-context.js';
import { TERMINAL, type Waiters } from './waiters.js';

/** What a worker shares with its queue. @internal */
export interface WorkerHost<H extends Handlers> {
  readonly backend: QueueBackend;
  readonly workerId: string;
  readonly options: ResolvedOptions<H>;
  readonly reporter: Reporter;
  readonly waiters: Waiters;
  /** Resolves once the backend is attached. */
  readonly attached: Promise<void>;
}

/** Give-backs of one op remembered per worker for the hot-loop floor (oldest forgotten first). */
const MAX_GIVE_BACK_MEMORY = 10_000;

/**
 * The least delay before this worker may take back an op it gave back `n` times in a row: none
 * the first time, then 5 ms doubling up to 1 s. A handler that gives its op back at once, every
 * time, thus costs at most a claim and a release per second per worker once warmed up.
 */
export const giveBackFloorMs = (n: number): number =>
  n <= 1 ? 0 : Math.min(1000, 5 * 2 ** (n - 2));

/** Runs a queue's ops. @internal */
export class Worker<H extends Handlers> {
  /** Aborted by close(): claim nothing more. */
  readonly stop = new AbortController();
  /** Aborted once close() is done with in-flight ops: heartbeats and outcome retries end. */
  readonly halt = new AbortController();
  readonly #host: WorkerHost<H>;
  readonly #inflight = new Map<Claim, Inflight>();
  /** Consecutive give-backs per op id, by this worker (see {@link giveBackFloorMs}). */
  readonly #givenBack = new Map<string, number>();
  #rung = false;
  #bell: Deferred<void> | undefined;
  #idleWaiters: Deferred<void>[] = [];
  #lastClaimEmpty = false;
  /** The loop waits for a wake-up, a due time or the poll, with room to claim when it ends. */
  #waitingWithRoom = false;
  #loop: Promise<void> | undefined;
  /** Wake-ups from other processes (see `wake`). */
  readonly #wakeups: DeferredWake;
  /** Options of the claim chained to each completion (the same for every op). */
  #chain: Omit<ClaimOptions, 'limit' | 'key'> | undefined;

  constructor(host: WorkerHost<H>) {
    this.#host = host;
    this.#wakeups = new DeferredWake(host.options.clock, () => this.ring());
  }

  get #options(): ResolvedOptions<H> {
    return this.#host.options;
  }

  get #backend(): QueueBackend {
    return this.#host.backend;
  }

  /** Starts the claim loop (async mode). */
  startLoop(): void {
    this.#loop = this.#runLoop();
  }

  /** New work may be claimable: the loop looks again at once. */
  ring(): void {
    this.#rung = true;
    const bell = this.#bell;
    this.#bell = undefined;
    bell?.resolve();
  }

  /**
   * Another process says there may be new work (a durable backend's notification). Every worker
   * of the queue hears it, and one of them gets the work: a worker with ops in flight does not
   * claim at once, since the completions of those ops chain claims of their own. It claims after
   * `WAKE_DEFER_MS`, unless before that a claim of its own sent after this wake-up looked (the
   * loop's claim, or a completion's chained claim that found nothing ready). A worker with
   * nothing in flight claims at once, and so does one on a backend that is not durable (in this
   * process: a claim costs no round trip).
   */
  wake(): void {
    const busy = this.#inflight.size > 0 && this.#loop !== undefined && this.#backend.durable;
    this.#wakeups.hear(busy && !this.stop.signal.aborted);
  }

  isIdle(): boolean {
    return (
      this.#inflight.size === 0 &&
      // A rung bell (or a deferred wake-up) means new work may have been stored since the last
      // claim came back empty.
      (this.#options.mode === 'sync' ||
        !this.#loop ||
        (this.#lastClaimEmpty && !this.#rung && !this.#wakeups.pending))
    );
  }

  /** Resolves when this instance is idle (see `Queue.onIdle`). */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    const d = deferred<void>();
    this.#idleWaiters.push(d);
    this.ring();
    return d.promise;
  }

  #checkIdle(): void {
    if (this.#idleWaiters.length === 0 || !this.isIdle()) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w.resolve();
  }

  #claimOptions(): Omit<ClaimOptions, 'limit' | 'key'> {
    return {
      leaseMs: this.#options.leaseMs,
      workerId: this.#host.workerId,
      maxLeaseExpiries: this.#options.maxLeaseExpiries,
      stopOnPoison: this.#options.policy.onFailure === 'stop',
    };
  }

  async #runLoop(): Promise<void> {
    try {
      await this.#host.attached;
    } catch {
      return;
    }
    const { clock, logger, concurrency } = this.#options;
    let errors = 0;
    while (!this.stop.signal.aborted) {
      this.#rung = false;
      const free = concurrency - this.#inflight.size;
      let claimed = 0;
      let due: number | null | undefined;
      if (free > 0) {
        try {
          this.#wakeups.answered();
          const result = await this.#backend.claim({ ...this.#claimOptions(), limit: free });
          const { claims, poisoned } = result;
          due = result.due;
          errors = 0;
          for (const p of poisoned) await this.#host.reporter.failed(p, undefined);
          if (this.stop.signal.aborted) {
            for (const c of claims) await this.#backend.release(c).catch(() => false);
            break;
          }
          for (const c of claims) this.#start(c);
          claimed = claims.length;
          this.#lastClaimEmpty = claimed === 0;
        } catch (err) {
          errors++;
          logger.warn({ err }, 'async-queue claim failed; retrying');
          await clock
            .sleep(Math.min(5000, 50 * 2 ** Math.min(errors, 7)), { signal: this.stop.signal })
            .catch(() => {});
          continue;
        }
        this.#checkIdle();
        if (claimed === free) continue;
      }
      if (this.#rung) continue;
      await this.#idleWait(free > 0, due);
    }
  }

  /**
   * Waits for the bell, the next due time or the poll. `known` is the next due time if the claim
   * just made read it (`null`: nothing due later); otherwise it is read here.
   */
  async #idleWait(canClaim: boolean, known: number | null | undefined): Promise<void> {
    const { clock, leaseMs } = this.#options;
    let timeout: number | undefined;
    if (canClaim) {
      const due =
        known === undefined
          ? await this.#backend.nextDueAt().catch(() => undefined)
          : (known ?? undefined);
      if (this.#rung) return;
      if (due !== undefined) timeout = Math.max(0, due - clock.now());
      if (this.#backend.durable) {
        const poll = this.#backend.pollMs > 0 ? this.#backend.pollMs : leaseMs / 2;
        timeout = timeout === undefined ? poll : Math.min(timeout, poll);
      }
    }
    if (this.#rung || this.stop.signal.aborted) return;
    // close() rings the bell after aborting `stop`, so the bell alone ends the wait.
    const bell = (this.#bell = deferred<void>());
    if (timeout === undefined) {
      await bell.promise;
      return;
    }
    const controller = new AbortController();
    this.#waitingWithRoom = canClaim;
    try {
      await Promise.race([
        bell.promise,
        clock.sleep(timeout, { signal: controller.signal }).catch(() => {}),
      ]);
    } finally {
      this.#waitingWithRoom = false;
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
    try {
      await this.#execute(entry);
    } catch (err) {
      this.#options.logger.error({ err, id: claim.op.id }, 'async-queue settle failed');
    } finally {
      this.#inflight.delete(claim);
      // A completion that claimed the next op handed its slot over: nothing for the loop to do.
      // One whose claim found nothing ready leaves the slot to the loop's next wake-up, due time
      // or poll when the loop waits for one (a claim now would find nothing either).
      if (!entry.chained && !(entry.drained && this.#waitingWithRoom)) this.ring();
      // No completion is left to look for the work of a deferred wake-up: the loop looks now.
      if (this.#wakeups.pending && this.#inflight.size === 0) {
        this.#wakeups.cancel();
        this.ring();
      }
      this.#checkIdle();
    }
  }

  /** Runs the handler of a claim and records its outcome. */
  async #execute(entry: Inflight): Promise<void> {
    const { waiters } = this.#host;
    const { op } = entry.claim;
    waiters.running(op.id);
    try {
      this.#host.reporter.started(op, this.#host.workerId);
      const started = this.#options.clock.now();
      let result: unknown;
      let error: unknown;
      let ok = true;
      try {
        result = await this.#callHandler(entry);
      } catch (thrown) {
        ok = false;
        error = thrown;
      }
      if (entry.abandoned) return;
      if (entry.givenBack) return await this.#gaveBack(entry, entry.givenBack);
      if (this.#givenBack.size > 0) this.#givenBack.delete(op.id);
      if (ok) await this.#succeeded(entry, result, started);
      else await this.#failed(entry, error);
    } finally {
      waiters.ran(op.id);
    }
  }

  /** Calls the op's handler (its promise, as is); a durable backend also needs a JSON result. */
  #callHandler(entry: Inflight): unknown {
    const { op } = entry.claim;
    const handler = this.#options.handlers[op.type];
    if (!handler) {
      throw new QueueError(
        'async-queue.unknown_type',
        `this worker has no handler for op type '${op.type}'`,
        { details: { type: op.type } },
      );
    }
    const result = handler(op.payload, new OpContext(entry));
    if (!this.#backend.durable) return result;
    return Promise.resolve(result).then((value: unknown) => {
      value ??= null;
      const why = explainNotJson(value, '$.result');
      if (why) {
        throw new QueueError(
          'async-queue.not_json',
          `result of op '${op.type}' is not JSON: ${why}`,
        );
      }
      return value;
    });
  }

  async #succeeded(entry: Inflight, result: unknown, started: number): Promise<void> {
    const { op } = entry.claim;
    const { reporter, waiters } = this.#host;
    const chain =
      this.#loop !== undefined && !this.stop.signal.aborted
        ? (this.#chain ??= this.#claimOptions())
        : undefined;
    // Wake-ups heard before this success is sent are looked for by its chained claim.
    const wakes = this.#wakeups.heard;
    // Only a durable backend's writes are retried (see #record).
    const c = this.#backend.durable
      ? await this.#record(entry, () => this.#backend.succeed(entry.claim, result, chain))
      : await this.#backend.succeed(entry.claim, result, chain);
    if (!c) return reporter.refused(entry.claim);
    const { next } = c;
    if (next) {
      if (next.poisoned.length === 0 && !this.stop.signal.aborted) {
        for (const claim of next.claims) this.#start(claim);
      } else await this.#adopt(next);
      entry.chained = next.claims.length > 0 && !this.stop.signal.aborted;
      entry.drained = next.claims.length === 0 && next.poisoned.length === 0;
      if (entry.drained) {
        this.#lastClaimEmpty = true;
        this.#wakeups.answered(wakes);
      }
    }
    if (reporter.events.hasListeners('op:succeeded')) {
      reporter.events.emit('op:succeeded', {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        result,
        durationMs: this.#options.clock.now() - started,
      });
    }
    const status = reporter.keyStatus(op.key);
    if (status) await status;
    waiters.settle(c.op, undefined, result);
  }

  /**
   * The handler gave its op back: released (attempt not counted) at the head of its key, runnable
   * after the delay asked for, or after this worker's hot-loop floor if that is longer.
   */
  async #gaveBack(
    entry: Inflight,
    asked: { reason: string | undefined; delayMs: number },
  ): Promise<void> {
    const { claim } = entry;
    const { op } = claim;
    const { reporter } = this.#host;
    const times = (this.#givenBack.get(op.id) ?? 0) + 1;
    this.#givenBack.delete(op.id);
    this.#givenBack.set(op.id, times);
    if (this.#givenBack.size > MAX_GIVE_BACK_MEMORY) {
      this.#givenBack.delete(this.#givenBack.keys().next().value!);
    }
    const retryAt = this.#options.clock.now() + Math.max(asked.delayMs, giveBackFloorMs(times));
    const released = await this.#record(entry, () => this.#backend.release(claim, { retryAt }));
    if (!released) return reporter.refused(claim);
    reporter.givenBack(op, asked.reason, retryAt);
    await reporter.keyStatus(op.key);
  }

  async #failed(entry: Inflight, error: unknown): Promise<void> {
    const { claim } = entry;
    const { op } = claim;
    const { reporter } = this.#host;
    const { clock, policy } = this.#options;
    if (entry.closingAbort) {
      // Closing aborted the handler: give the op back instead of counting a failure.
      if (await this.#backend.release(claim)) reporter.released(op);
      else reporter.refused(claim);
      return;
    }
    const serialized = serializeError(error);
    if (op.attempts < policy.maxAttempts) {
      const retryAt = clock.now() + policy.backoff(op.attempts);
      const c = await this.#record(entry, () => this.#backend.fail(claim, serialized, { retryAt }));
      if (!c) return reporter.refused(claim);
      reporter.events.emit('op:retrying', {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        error: serialized,
        retryAt,
      });
      await reporter.keyStatus(op.key);
      return;
    }
    const c = await this.#record(entry, () =>
      this.#backend.fail(claim, serialized, { stop: policy.onFailure === 'stop' }),
    );
    if (!c) return reporter.refused(claim);
    await reporter.failed(c, error);
  }

  /**
   * Records an op's outcome, retrying a write that failed (the database restarting, a deadlock,
   * a dropped connection) for up to one lease: the entry stays in flight meanwhile, so its lease
   * is still renewed and its slot is not given to another op. Giving up leaves the op claimed;
   * it runs again elsewhere once the lease expires (at-least-once). A retried write that had in
   * fact been committed is refused by the fencing token, never applied twice.
   */
  async #record<T>(entry: Inflight, write: () => Promise<T>): Promise<T> {
    const { clock, leaseMs, logger } = this.#options;
    const until = clock.now() + leaseMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (err) {
        const wait = Math.min(1000, 25 * 2 ** attempt);
        const give = !this.#backend.durable || this.halt.signal.aborted;
        if (give || clock.now() + wait >= until) throw err;
        logger.warn(
          { err, id: entry.claim.op.id, attempt },
          'async-queue could not record an outcome; retrying',
        );
        await clock.sleep(wait, { signal: this.halt.signal }).catch(() => {});
      }
    }
  }

  /** Starts ops claimed along with a completion (they take the finishing op's slot). */
  async #adopt(next: { claims: Claim[]; poisoned: Completion[] }): Promise<void> {
    const { reporter } = this.#host;
    for (const p of next.poisoned) await reporter.failed(p, undefined);
    for (const claim of next.claims) {
      if (this.stop.signal.aborted) {
        if (await this.#backend.release(claim).catch(() => false)) reporter.released(claim.op);
      } else this.#start(claim);
    }
  }

  /** Sync mode: runs the key's ops inline until `id` is finished (without id: none runnable). */
  async runInline(key: string, id: string | undefined): Promise<void> {
    const { clock } = this.#options;
    for (;;) {
      if (this.stop.signal.aborted) return;
      if (id !== undefined) {
        const current = await this.#backend.get(id);
        if (!current || TERMINAL.has(current.status)) return;
      }
      const { claims, poisoned } = await this.#backend.claim({
        ...this.#claimOptions(),
        limit: 1,
        key,
      });
      for (const p of poisoned) await this.#host.reporter.failed(p, undefined);
      const claim = claims[0];
      if (claim) {
        const entry = new Inflight(claim);
        this.#inflight.set(claim, entry);
        try {
          entry.done = this.#execute(entry);
          await entry.done;
        } finally {
          this.#inflight.delete(claim);
          this.ring();
        }
        continue;
      }
      const info = await this.#backend.inspect(key);
      if (info.status === 'blocked' || (!info.running && info.pending.length === 0)) return;
      // Running inline elsewhere in this process, or waiting for a retry: wait and look again.
      let timeout = 50;
      const due = await this.#backend.nextDueAt();
      if (!info.running && due !== undefined) timeout = Math.max(0, due - clock.now());
      this.#rung = false;
      const bell = (this.#bell = deferred<void>());
      const controller = new AbortController();
      await Promise.race([
        bell.promise,
        clock.sleep(timeout, { signal: controller.signal }).catch(() => {}),
      ]);
      controller.abort();
    }
  }

  /** Durable backends: extends the leases of ops in flight until close() is done with them. */
  heartbeatLoop(): Promise<void> {
    return heartbeatLoop({
      backend: this.#backend,
      options: this.#options,
      halt: this.halt.signal,
      held: () => [...this.#inflight.values()].filter((e) => !e.abandoned),
    });
  }

  /**
   * Close, first half: stops claiming; lets in-flight handlers finish for `closeGraceMs`, then
   * aborts their signal, waits `closeAbortWaitMs` more, and gives the ops still unfinished back.
   */
  async drain(error: () => QueueError): Promise<void> {
    const { clock, closeGraceMs, closeAbortWaitMs } = this.#options;
    this.stop.abort(error());
    this.#wakeups.cancel();
    this.ring();
    await this.#loop;
    const pending = () => Promise.allSettled([...this.#inflight.values()].map((e) => e.done));
    const within = async (ms: number) => {
      const grace = new AbortController();
      await Promise.race([pending(), clock.sleep(ms, { signal: grace.signal }).catch(() => {})]);
      grace.abort();
    };
    if (this.#inflight.size > 0) await within(closeGraceMs);
    if (this.#inflight.size === 0) return;
    for (const e of this.#inflight.values()) {
      e.closingAbort = true;
      e.controller.abort(
        new QueueError('async-queue.closed', 'the queue is closing; stop and give the op back'),
      );
    }
    await within(closeAbortWaitMs);
    for (const e of [...this.#inflight.values()]) {
      e.abandoned = true;
      if (await this.#backend.release(e.claim).catch(() => false)) {
        this.#host.reporter.released(e.claim.op);
      }
      this.#inflight.delete(e.claim);
    }
  }

  /** Close, second half: idle waiters resolve; heartbeats and outcome retries end. */
  finish(): void {
    for (const d of this.#idleWaiters) d.resolve();
    this.#idleWaiters = [];
    this.halt.abort();
  }
}
