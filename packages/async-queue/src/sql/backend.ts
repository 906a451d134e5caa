import { systemClock, type Clock, type SerializedError } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { isUniqueViolation, sql } from '../sql-peer.js';
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
import type { ChainOptions, Claimed, QueueDialect } from './dialects/dialect.js';
import { KEYS, OPS } from './names.js';
import { migrations, num, toInfo, type KeyRow, type OpRow } from './schema.js';
import { QueueStore } from './store.js';
import { SucceedBatcher, type SucceedItem } from './succeed-batch.js';

/** A queue instance of this process, as its neighbours on the same database see it. */
interface LocalListener {
  wake(): void;
  settled(id: string): void;
}

/**
 * Queue instances of one process sharing a Database object and queue name wake each other
 * directly (no need to wait for NOTIFY or the next poll).
 */
const local = new WeakMap<Database, Map<string, Set<LocalListener>>>();

function localListeners(database: Database, name: string): Set<LocalListener> {
  let byName = local.get(database);
  if (!byName) local.set(database, (byName = new Map()));
  let set = byName.get(name);
  if (!set) byName.set(name, (set = new Set()));
  return set;
}

/** The {@link QueueBackend} methods, bound to their instance. */
const BACKEND_METHODS = [
  'attach',
  'enqueue',
  'claim',
  'heartbeat',
  'succeed',
  'fail',
  'release',
  'resume',
  'discard',
  'get',
  'inspect',
  'keyStatus',
  'activeKeys',
  'deadLetters',
  'prune',
  'nextDueAt',
  'close',
] as const satisfies readonly (keyof QueueBackend)[];

/**
 * The durable jobboard over `@rigging/sql`: the {@link QueueBackend} contract on the shared
 * statements of {@link QueueStore}, with one {@link QueueDialect} strategy for what differs
 * between SQLite, PostgreSQL and MySQL/MariaDB. Built by `sqlBackend()`.
 * @internal
 */
export class SqlQueueBackend implements QueueBackend {
  readonly kind: string;
  readonly durable = true;
  readonly pollMs: number;
  readonly #database: Database;
  readonly #dialect: QueueDialect;
  readonly #store: QueueStore;
  readonly #stop = new AbortController();
  readonly #neighbours: Set<LocalListener>;
  readonly #batcher = new SucceedBatcher((items) => this.#succeedMany(items));
  #clock: Clock = systemClock;
  #me: LocalListener | undefined;
  #listening: Promise<void> | undefined;
  #closed = false;

  constructor(database: Database, dialect: QueueDialect, name: string, pollMs: number) {
    this.kind = `sql:${dialect.name}`;
    this.pollMs = pollMs;
    this.#database = database;
    this.#dialect = dialect;
    this.#store = new QueueStore(database, dialect, name, pollMs, () => this.#clock.now());
    this.#neighbours = localListeners(database, name);
    // Callers may take a method off the object (to wrap it, say), as with memoryBackend().
    for (const method of BACKEND_METHODS)
      Object.defineProperty(this, method, {
        value: this[method].bind(this),
        writable: true,
        configurable: true,
      });
  }

  get #name(): string {
    return this.#store.name;
  }

  #now(): number {
    return this.#clock.now();
  }

  /** Wakes the other queue instances of this process on the same database and queue. */
  #wakeLocal(): void {
    for (const l of this.#neighbours) if (l !== this.#me) l.wake();
  }

  /** Tells the other local instances that these ops finished (their `call`s settle). */
  #settledLocal(ids: string[]): void {
    for (const l of this.#neighbours) {
      if (l !== this.#me) for (const id of ids) l.settled(id);
    }
  }

  async attach(context: BackendContext): Promise<void> {
    this.#clock = context.clock;
    await this.#database.migrate('async-queue', migrations);
    this.#me = { wake: () => context.wake(), settled: (id) => context.settled(id) };
    this.#neighbours.add(this.#me);
    if (this.#dialect.pushes) {
      this.#listening = this.#dialect.listen(
        this.#store,
        {
          wake: () => context.wake(),
          settled: (id) => context.settled(id),
          warn: (err, message) =>
            err === undefined
              ? context.logger.warn(message)
              : context.logger.warn({ err }, message),
        },
        this.#stop.signal,
        this.#clock,
      );
    }
  }

  async enqueue(input: EnqueueInput): Promise<{ op: OpInfo; created: boolean }> {
    const at = this.#now();
    const payload = JSON.stringify(input.payload ?? null);
    const attempt = () => this.#dialect.enqueue(this.#store, input, payload, at);
    let out;
    try {
      out = await attempt();
    } catch (error) {
      // Two enqueues with one idempotency key raced: the second finds the first's op.
      if (input.idempotencyKey === undefined || !isUniqueViolation(error)) throw error;
      out = await attempt();
    }
    const { row, created } = out;
    const held =
      out.held ??
      (row.status === 'queued' &&
        (await this.#store.keyRow(this.#store.db, row.op_key, false))?.state === 'blocked');
    if (created) this.#wakeLocal();
    if (!created && (row.op_key !== input.key || row.type !== input.type)) {
      throw new QueueError(
        'async-queue.idempotency_conflict',
        `idempotency key '${input.idempotencyKey}' was used for op ${row.id} (key '${row.op_key}', type '${row.type}'), not key '${input.key}', type '${input.type}'`,
        { details: { id: row.id, key: row.op_key, type: row.type } },
      );
    }
    return { op: toInfo(row, held), created };
  }

  async claim(options: ClaimOptions): Promise<Claimed> {
    if (options.limit <= 0) return { claims: [], poisoned: [] };
    return this.#dialect.claim(this.#store, options);
  }

  heartbeat(claims: readonly Claim[], leaseMs: number): Promise<Set<Claim>> {
    return this.#dialect.heartbeat(this.#store, claims, this.#now() + leaseMs);
  }

  async succeed(
    claim: Claim,
    result: unknown,
    next?: ChainOptions,
  ): Promise<Completion | undefined> {
    const c = await this.#batcher.add(claim, result, next);
    if (c) this.#settledLocal([c.op.id]);
    return c;
  }

  /** Records one batch of successes; once closed, none claims a next op. */
  #succeedMany(items: SucceedItem[]): Promise<(Completion | undefined)[]> {
    if (this.#closed) for (const it of items) it.next = undefined;
    const next = items.find((it) => it.next)?.next;
    return this.#dialect.succeedMany(this.#store, items, next);
  }

  async fail(
    claim: Claim,
    error: SerializedError,
    outcome: FailOutcome,
  ): Promise<Completion | undefined> {
    const store = this.#store;
    const c = await store.tx(async (trx) => {
      if (!(await store.holdsClaim(trx, claim))) return undefined;
      const at = this.#now();
      const row = (await store.opRow(trx, claim.op.id))!;
      if ('retryAt' in outcome) {
        await trx
          .updateTable(OPS)
          .set({ status: 'queued', error: JSON.stringify(error) })
          .where('id', '=', row.id)
          .execute();
        await trx
          .updateTable(KEYS)
          .set({
            state: 'ready',
            avail_at: outcome.retryAt,
            pending: sql`pending + 1`,
            running_op: null,
            running_type: null,
          })
          .where('queue', '=', this.#name)
          .where('op_key', '=', row.op_key)
          .execute();
        return {
          op: toInfo({ ...row, status: 'queued', error: JSON.stringify(error) }),
          cancelled: [],
          blocked: false,
        };
      }
      const failed = await store.failOp(trx, row, error, outcome.stop, at);
      if (claim.announce || failed.cancelled.length > 0) {
        await store.notify(trx, `d:${this.#name}:${row.id}`);
      }
      for (const x of failed.cancelled) await store.notify(trx, `d:${this.#name}:${x.id}`);
      return failed;
    });
    if (c && !('retryAt' in outcome)) {
      this.#settledLocal([c.op.id, ...c.cancelled.map((x) => x.id)]);
    }
    return c;
  }

  async release(claim: Claim, options?: ReleaseOptions): Promise<boolean> {
    const store = this.#store;
    const released = await store.tx(async (trx) => {
      if (!(await store.holdsClaim(trx, claim))) return false;
      const token = claim.token + 1;
      await trx
        .updateTable(OPS)
        .set({ status: 'queued', token, attempts: sql`attempts - 1` })
        .where('id', '=', claim.op.id)
        .execute();
      await trx
        .updateTable(KEYS)
        .set({
          state: 'ready',
          avail_at: options?.retryAt ?? 0,
          pending: sql`pending + 1`,
          running_op: null,
          running_type: null,
          token,
        })
        .where('queue', '=', this.#name)
        .where('op_key', '=', claim.op.key)
        .execute();
      await store.notify(trx, `n:${this.#name}`);
      return true;
    });
    if (released) this.#wakeLocal();
    return released;
  }

  async resume(key: string): Promise<boolean> {
    const store = this.#store;
    const resumed = await store.tx(async (trx) => {
      const k = await store.keyRow(trx, key, true);
      if (!k || k.state !== 'blocked') return false;
      await trx
        .updateTable(KEYS)
        .set({ blocked_by: null, avail_at: 0, turn: this.#now() })
        .set({ state: sql`case when pending > 0 then 'ready' else 'idle' end` })
        .where('queue', '=', this.#name)
        .where('op_key', '=', key)
        .execute();
      await store.notify(trx, `n:${this.#name}`);
      return true;
    });
    if (resumed) this.#wakeLocal();
    return resumed;
  }

  async discard(key: string): Promise<OpInfo[]> {
    const store = this.#store;
    const cancelled = await store.tx(async (trx) => {
      const k = await store.keyRow(trx, key, true);
      if (!k) return [];
      const ops = await store.cancelQueued(trx, key, 'discard', this.#now());
      await trx
        .updateTable(KEYS)
        .set({
          pending: 0,
          blocked_by: null,
          state: k.state === 'running' ? 'running' : 'idle',
        })
        .where('queue', '=', this.#name)
        .where('op_key', '=', key)
        .execute();
      for (const x of ops) await store.notify(trx, `d:${this.#name}:${x.id}`);
      return ops;
    });
    this.#settledLocal(cancelled.map((x) => x.id));
    return cancelled;
  }

  async get(id: string): Promise<OpInfo | undefined> {
    const { db } = this.#store;
    const row = await this.#store.opRow(db, id);
    if (!row || row.queue !== this.#name) return undefined;
    const held =
      row.status === 'queued' &&
      (await this.#store.keyRow(db, row.op_key, false))?.state === 'blocked';
    return toInfo(row, held);
  }

  async inspect(key: string): Promise<KeyInfo> {
    const { db } = this.#store;
    const k = await this.#store.keyRow(db, key, false);
    const status = await this.#store.statusOf(db, k);
    const rows = (await db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#name)
      .where('op_key', '=', key)
      .where('status', 'in', ['queued', 'running'])
      .orderBy('seq')
      .execute()) as OpRow[];
    const running = rows.find((r) => r.status === 'running');
    const blocked = k?.state === 'blocked';
    const pending = rows.filter((r) => r.status === 'queued').map((r) => toInfo(r, blocked));
    return {
      key,
      status,
      blockedBy: k?.blocked_by ?? undefined,
      running: running ? toInfo(running) : undefined,
      pending,
      held: blocked ? pending.length : 0,
    };
  }

  async keyStatus(key: string): Promise<KeyStatus> {
    const { db } = this.#store;
    return this.#store.statusOf(db, await this.#store.keyRow(db, key, false));
  }

  async activeKeys(limit: number): Promise<{ key: string; status: KeyStatus }[]> {
    const { db } = this.#store;
    const rows = (await db
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.#name)
      .where('state', '!=', 'idle')
      .orderBy('op_key')
      .limit(limit)
      .execute()) as KeyRow[];
    const out: { key: string; status: KeyStatus }[] = [];
    for (const k of rows) {
      const status = await this.#store.statusOf(db, k);
      if (status !== 'idle') out.push({ key: k.op_key, status });
    }
    return out;
  }

  async deadLetters(limit: number): Promise<OpInfo[]> {
    const rows = (await this.#store.db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#name)
      .where('status', '=', 'failed')
      .orderBy('finished_at', 'desc')
      .limit(limit)
      .execute()) as OpRow[];
    return rows.map((r) => toInfo(r));
  }

  async prune(retention: RetentionOptions): Promise<number> {
    const { db } = this.#store;
    let n = 0;
    if (retention.maxAgeMs !== undefined) {
      const r = await db
        .deleteFrom(OPS)
        .where('queue', '=', this.#name)
        .where('status', 'in', ['succeeded', 'cancelled', 'failed'])
        .where('finished_at', '<', this.#now() - retention.maxAgeMs)
        .executeTakeFirst();
      n += Number(r.numDeletedRows);
    }
    if (retention.maxCount !== undefined) {
      const edge = (await db
        .selectFrom(OPS)
        .select('finished_at')
        .where('queue', '=', this.#name)
        .where('status', 'in', ['succeeded', 'cancelled'])
        .orderBy('finished_at', 'desc')
        .limit(1)
        .offset(retention.maxCount)
        .executeTakeFirst()) as { finished_at: number | string } | undefined;
      if (edge) {
        const r = await db
          .deleteFrom(OPS)
          .where('queue', '=', this.#name)
          .where('status', 'in', ['succeeded', 'cancelled'])
          .where('finished_at', '<=', Number(edge.finished_at))
          .executeTakeFirst();
        n += Number(r.numDeletedRows);
      }
    }
    return n;
  }

  async nextDueAt(): Promise<number | undefined> {
    const r = (await this.#store.db
      .selectFrom(KEYS)
      .select((eb) => eb.fn.min('avail_at').as('due'))
      .where('queue', '=', this.#name)
      .where('state', '=', 'ready')
      .where('avail_at', '>', this.#now())
      .executeTakeFirst()) as { due: number | string | null } | undefined;
    return num(r?.due ?? null);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stop.abort();
    if (this.#me) this.#neighbours.delete(this.#me);
    await this.#listening;
  }
}
