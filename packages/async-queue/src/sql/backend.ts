import { systemClock, type Clock, type SerializedError } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { isUniqueViolation } from '../sql-peer.js';
import type {
  BackendContext,
  Claim,
  ClaimOptions,
  Completion,
  EnqueueInput,
  FailOutcome,
  QueueBackend,
  ReleaseOptions,
} from '../backend.js';
import { QueueError } from '../errors.js';
import type { KeyInfo, KeyStatus, OpInfo, RetentionOptions } from '../types.js';
import type { Listening, Presence, QueueDialect } from './dialects/dialect.js';
import { ownerColumn } from './owner.js';
import type { Notifier, NotifierListener } from './notifier.js';
import { toInfo } from './rows.js';
import { migrations } from './schema.js';
import { QueueStore } from './store.js';
import { SucceedBatcher } from './succeed-batch.js';
import type { ChainOptions, Claimed, SucceedItem } from './types.js';

/**
 * The durable jobboard over `@rigging/sql`: the {@link QueueBackend} contract on the statements
 * of {@link QueueStore} (which owns every statement, in its reads, claims and outcomes), with
 * successes batched and the queue instances of this process that share its {@link Notifier}
 * woken directly. Built by `sqlBackend()`.
 * @internal
 */
export class SqlQueueBackend implements QueueBackend {
  readonly kind: string;
  readonly durable = true;
  readonly pollMs: number;
  readonly #database: Database;
  readonly #dialect: QueueDialect;
  readonly #store: QueueStore;
  readonly #notifier: Notifier;
  readonly #stop = new AbortController();
  readonly #batcher: SucceedBatcher;
  #clock: Clock = systemClock;
  #me: NotifierListener | undefined;
  #unsubscribe: (() => void) | undefined;
  #listening: Listening | undefined;
  /** A wait asked for ends before the backend listened (attach): listen for them from the start. */
  #wantsEnds = false;
  /** This process's evidence of liveness, recorded with each claim (dialects that have one). */
  #presence: Promise<Presence | undefined> | undefined;
  #logger: BackendContext['logger'] | undefined;
  #closed = false;

  constructor(
    database: Database,
    dialect: QueueDialect,
    name: string,
    pollMs: number,
    notifier: Notifier,
  ) {
    this.kind = `sql:${dialect.name}`;
    this.pollMs = pollMs;
    this.#database = database;
    this.#dialect = dialect;
    this.#notifier = notifier;
    this.#store = new QueueStore(database, dialect, name, pollMs, () => this.#clock.now());
    this.#batcher = new SucceedBatcher((items) => this.#succeedMany(items), {
      splitBatches: dialect.splitBatches,
    });
  }

  get #name(): string {
    return this.#store.name;
  }

  #now(): number {
    return this.#clock.now();
  }

  async attach(context: BackendContext): Promise<void> {
    this.#clock = context.clock;
    this.#logger = context.logger;
    await this.#database.migrate('async-queue', migrations);
    this.#me = { wake: () => context.wake(), settled: (id) => context.settled(id) };
    this.#unsubscribe = this.#notifier.subscribe(this.#name, this.#me);
    this.#listening = this.#dialect.listen?.(
      this.#database,
      this.#name,
      {
        wake: () => context.wake(),
        settled: (id) => context.settled(id),
        warn: (err, message) =>
          err === undefined ? context.logger.warn(message) : context.logger.warn({ err }, message),
      },
      { work: context.claims ?? true, signal: this.#stop.signal, clock: this.#clock },
    );
    if (this.#wantsEnds) void this.#listening?.watchEnds();
  }

  watchEnds(): Promise<void> {
    this.#wantsEnds = true;
    return this.#listening?.watchEnds() ?? Promise.resolve();
  }

  async enqueue(input: EnqueueInput): Promise<{ op: OpInfo; created: boolean }> {
    const at = this.#now();
    const payload = JSON.stringify(input.payload ?? null);
    let out;
    try {
      out = await this.#store.enqueue(input, payload, at);
    } catch (error) {
      // Two enqueues with one idempotency key raced: the second finds the first's op.
      if (input.idempotencyKey === undefined || !isUniqueViolation(error)) throw error;
      out = await this.#store.enqueue(input, payload, at);
    }
    const { row, created } = out;
    if (!created && (row.op_key !== input.key || row.type !== input.type)) {
      throw new QueueError(
        'async-queue.idempotency_conflict',
        `idempotency key '${input.idempotencyKey}' was used for op ${row.id} (key '${row.op_key}', type '${row.type}'), not key '${input.key}', type '${input.type}'`,
        { details: { id: row.id, key: row.op_key, type: row.type } },
      );
    }
    if (!created && row.status === 'queued') {
      // A queued row may be the op its key runs, or held: read it with its key's row.
      return { op: (await this.#store.reads.get(row.id)) ?? toInfo(row), created };
    }
    const held = out.held ?? (await this.#store.reads.isHeld(row));
    if (created) this.#notifier.wake(this.#name, this.#me);
    return { op: toInfo(row, held), created };
  }

  /**
   * The `worker` recorded with a claim: the worker id and this process's owner tag, so that
   * other workers can take the claim over as soon as this process is provably gone.
   */
  async #owner(workerId: string): Promise<string> {
    const { owners } = this.#dialect;
    if (!owners || this.#closed) return workerId;
    if (!this.#presence) {
      const opening: Promise<Presence | undefined> = owners.presence(this.#database).then(
        (p) => {
          p.lost.addEventListener('abort', () => {
            if (this.#presence === opening) this.#presence = undefined;
          });
          return p;
        },
        (err: unknown) => {
          this.#logger?.warn({ err }, 'async-queue could not open its presence session');
          if (this.#presence === opening) this.#presence = undefined;
          return undefined;
        },
      );
      this.#presence = opening;
    }
    const presence = await this.#presence;
    return ownerColumn(workerId, presence?.tag);
  }

  async claim(options: ClaimOptions): Promise<Claimed> {
    if (options.limit <= 0) return { claims: [], poisoned: [] };
    return this.#store.claims.claim({ ...options, workerId: await this.#owner(options.workerId) });
  }

  heartbeat(claims: readonly Claim[], leaseMs: number): Promise<Set<Claim>> {
    return this.#store.claims.heartbeat(claims, this.#now() + leaseMs);
  }

  async succeed(
    claim: Claim,
    result: unknown,
    next?: ChainOptions,
  ): Promise<Completion | undefined> {
    const c = await this.#batcher.add(claim, result, next);
    if (c) this.#notifier.settled(this.#name, [c.op.id], this.#me);
    return c;
  }

  /** Records one batch of successes; once closed, none claims a next op. */
  async #succeedMany(items: SucceedItem[]): Promise<(Completion | undefined)[]> {
    if (this.#closed) for (const it of items) it.next = undefined;
    const next = items.find((it) => it.next)?.next;
    const chain = next && { ...next, workerId: await this.#owner(next.workerId) };
    return this.#store.outcomes.succeedMany(items, chain);
  }

  async fail(
    claim: Claim,
    error: SerializedError,
    outcome: FailOutcome,
  ): Promise<Completion | undefined> {
    const c = await this.#store.outcomes.fail(claim, error, outcome);
    if (c && !('retryAt' in outcome)) {
      this.#notifier.settled(this.#name, [c.op.id, ...c.cancelled.map((x) => x.id)], this.#me);
    }
    return c;
  }

  async release(claim: Claim, options?: ReleaseOptions): Promise<boolean> {
    const released = await this.#store.outcomes.release(claim, options?.retryAt ?? 0);
    if (released) this.#notifier.wake(this.#name, this.#me);
    return released;
  }

  async resume(key: string): Promise<boolean> {
    const resumed = await this.#store.outcomes.resume(key);
    if (resumed) this.#notifier.wake(this.#name, this.#me);
    return resumed;
  }

  async discard(key: string): Promise<OpInfo[]> {
    const cancelled = await this.#store.outcomes.discard(key);
    this.#notifier.settled(
      this.#name,
      cancelled.map((x) => x.id),
      this.#me,
    );
    return cancelled;
  }

  getMany(ids: readonly string[]): Promise<OpInfo[]> {
    return this.#store.reads.getMany(ids);
  }

  get(id: string): Promise<OpInfo | undefined> {
    return this.#store.reads.get(id);
  }

  inspect(key: string): Promise<KeyInfo> {
    return this.#store.reads.inspect(key);
  }

  keyStatus(key: string): Promise<KeyStatus> {
    return this.#store.reads.keyStatus(key);
  }

  activeKeys(limit: number): Promise<{ key: string; status: KeyStatus }[]> {
    return this.#store.reads.activeKeys(limit);
  }

  deadLetters(limit: number): Promise<OpInfo[]> {
    return this.#store.reads.deadLetters(limit);
  }

  prune(retention: RetentionOptions): Promise<number> {
    return this.#store.prune(retention);
  }

  nextDueAt(): Promise<number | undefined> {
    return this.#store.reads.nextDueAt();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stop.abort();
    this.#unsubscribe?.();
    await this.#listening?.done;
    const presence = await this.#presence;
    this.#presence = undefined;
    await presence?.close().catch(() => {});
  }
}
