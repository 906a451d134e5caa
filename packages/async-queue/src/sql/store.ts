// The SQL backend's statements, all of them: every change to a key's ops happens here, under its
// key row lock (or in one of PostgreSQL's single statements, which the store decides to use).
// Dialects supply the pieces that differ; fencing rules come from `fence.ts`.
import { randomUUID } from 'node:crypto';
import type { SerializedError } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { sql } from '../sql-peer.js';
import type { Claim, ClaimOptions, Completion, EnqueueInput, FailOutcome } from '../backend.js';
import type { KeyInfo, KeyStatus, OpInfo, RetentionOptions } from '../types.js';
import type { QueueDialect } from './dialects/dialect.js';
import { heldBy, holds, nextToken } from './fence.js';
import { ownerTagOf } from './owner.js';
import { KEYS, OPS } from './names.js';
import { newOpRow, num, toInfo, type Db, type KeyRow, type OpRow } from './rows.js';
import type {
  ChainOptions,
  Claimed,
  ClaimedRow,
  Enqueued,
  GrantSet,
  SucceedItem,
} from './types.js';

/** The completion of an accepted success. */
const succeeded = (it: SucceedItem, at: number): Completion => ({
  op: { ...it.claim.op, status: 'succeeded' as const, result: it.result, finishedAt: at },
  cancelled: [],
  blocked: false,
});

/**
 * Hands the ops claimed for a batch to the accepted successes that asked for one (at most one
 * each: it takes over that op's slot); poisoned completions go with the first.
 */
function handOut(
  out: (Completion | undefined)[],
  items: SucceedItem[],
  chained: Claimed | undefined,
): (Completion | undefined)[] {
  if (!chained) return out;
  let i = 0;
  let poisoned = chained.poisoned;
  for (let j = 0; j < items.length; j++) {
    const c = out[j];
    if (!c || !items[j]!.next) continue;
    const claim = chained.claims[i++];
    c.next = { claims: claim ? [claim] : [], poisoned };
    poisoned = [];
  }
  return out;
}

/** The statements of one queue (`name`) on one database, for its dialect. @internal */
export class QueueStore {
  readonly db: Db;
  #lastExpiredCheck = 0;

  constructor(
    readonly database: Database,
    readonly dialect: QueueDialect,
    readonly name: string,
    readonly pollMs: number,
    /** The queue's clock (epoch ms). */
    readonly now: () => number,
  ) {
    this.db = database.db as Db;
  }

  /** Runs `fn` in a transaction, retried on serialization failures and deadlocks. */
  #tx<T>(fn: (trx: Db) => Promise<T>): Promise<T> {
    return this.database.transaction(fn, { retries: 20 });
  }

  #notify(trx: Db, payload: string): Promise<void> {
    return this.dialect.notify(trx, payload);
  }

  /** Workers of other processes may find work (PostgreSQL NOTIFY on commit). */
  #announceWork(trx: Db): Promise<void> {
    return this.#notify(trx, `n:${this.name}`);
  }

  /** These ops finished: `call`s of other processes can settle. */
  async #announceDone(trx: Db, ids: readonly string[]): Promise<void> {
    for (const id of ids) await this.#notify(trx, `d:${this.name}:${id}`);
  }

  // ------------------------------------------------------------------ reads

  /** The key's row, locked until the transaction ends when `lock` (and the dialect locks rows). */
  async #keyRow(trx: Db, key: string, lock: boolean): Promise<KeyRow | undefined> {
    let q = trx
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('op_key', '=', key);
    if (lock) q = this.dialect.forUpdate(q, false);
    return (await q.executeTakeFirst()) as KeyRow | undefined;
  }

  /** The op's row, in any queue (callers check `queue`). */
  async #opRow(trx: Db, id: string): Promise<OpRow | undefined> {
    return (await trx.selectFrom(OPS).selectAll().where('id', '=', id).executeTakeFirst()) as
      OpRow | undefined;
  }

  async #byIdempotencyKey(trx: Db, idempotencyKey: string): Promise<OpRow | undefined> {
    return (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('idempotency_key', '=', idempotencyKey)
      .executeTakeFirst()) as OpRow | undefined;
  }

  /** Whether a queued op of `key` is held (its key is blocked). */
  async isHeld(row: OpRow): Promise<boolean> {
    return (
      row.status === 'queued' &&
      (await this.#keyRow(this.db, row.op_key, false))?.state === 'blocked'
    );
  }

  /** The op, while retained in this queue. */
  async get(id: string): Promise<OpInfo | undefined> {
    const row = await this.#opRow(this.db, id);
    if (!row || row.queue !== this.name) return undefined;
    return toInfo(row, await this.isHeld(row));
  }

  /** The public status of a key row (`queued`, `<type>-in-progress`, `blocked`, `idle`). */
  async #statusOf(trx: Db, k: KeyRow | undefined): Promise<KeyStatus> {
    if (!k) return 'idle';
    switch (k.state) {
      case 'blocked':
        return 'blocked';
      case 'running':
        return `${k.running_type ?? 'op'}-in-progress`;
      case 'ready': {
        const head = (await trx
          .selectFrom(OPS)
          .select(['type', 'attempts'])
          .where('queue', '=', this.name)
          .where('op_key', '=', k.op_key)
          .where('status', '=', 'queued')
          .orderBy('seq')
          .limit(1)
          .executeTakeFirst()) as { type: string; attempts: number | string } | undefined;
        if (!head) return 'idle';
        return Number(head.attempts) > 0 ? `${head.type}-in-progress` : 'queued';
      }
      default:
        return 'idle';
    }
  }

  async keyStatus(key: string): Promise<KeyStatus> {
    return this.#statusOf(this.db, await this.#keyRow(this.db, key, false));
  }

  async inspect(key: string): Promise<KeyInfo> {
    const { db } = this;
    const k = await this.#keyRow(db, key, false);
    const status = await this.#statusOf(db, k);
    const rows = (await db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
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

  async activeKeys(limit: number): Promise<{ key: string; status: KeyStatus }[]> {
    const rows = (await this.db
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('state', '!=', 'idle')
      .orderBy('op_key')
      .limit(limit)
      .execute()) as KeyRow[];
    const out: { key: string; status: KeyStatus }[] = [];
    for (const k of rows) {
      const status = await this.#statusOf(this.db, k);
      if (status !== 'idle') out.push({ key: k.op_key, status });
    }
    return out;
  }

  async deadLetters(limit: number): Promise<OpInfo[]> {
    const rows = (await this.db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('status', '=', 'failed')
      .orderBy('finished_at', 'desc')
      .limit(limit)
      .execute()) as OpRow[];
    return rows.map((r) => toInfo(r));
  }

  async nextDueAt(): Promise<number | undefined> {
    const r = (await this.db
      .selectFrom(KEYS)
      .select((eb) => eb.fn.min('avail_at').as('due'))
      .where('queue', '=', this.name)
      .where('state', '=', 'ready')
      .where('avail_at', '>', this.now())
      .executeTakeFirst()) as { due: number | string | null } | undefined;
    return num(r?.due ?? null);
  }

  // ------------------------------------------------------------------ enqueue

  /**
   * The key row's changes when an op is counted in: one more pending op, and an idle key readied
   * with a new turn. SET expressions are ordered for MySQL, which evaluates them left to right
   * with the updated values.
   */
  #keyUpsert(key: string, at: number) {
    const K = (c: string) => sql.ref(`${KEYS}.${c}`);
    const wasIdle = sql`${K('state')} = 'idle'`;
    return {
      values: {
        queue: this.name,
        op_key: key,
        state: 'ready',
        next_seq: 1,
        pending: 1,
        avail_at: 0,
        turn: at,
      },
      bump: {
        next_seq: sql<number>`${K('next_seq')} + 1`,
        pending: sql<number>`${K('pending')} + 1`,
        avail_at: sql<number>`case when ${wasIdle} then 0 else ${K('avail_at')} end`,
        turn: sql<number>`case when ${wasIdle} then ${at} else ${K('turn')} end`,
        state: sql<string>`case when ${wasIdle} then 'ready' else ${K('state')} end`,
      },
    };
  }

  /**
   * Stores an op durably, or finds the op its idempotency key named. One statement on
   * PostgreSQL (after a look-up when there is an idempotency key); elsewhere one transaction:
   * one upsert counts the op in and readies an idle key (and locks the key row, which serializes
   * enqueues of one key), and workers are woken when the key was idle.
   */
  async enqueue(input: EnqueueInput, payload: string, at: number): Promise<Enqueued> {
    const { hot } = this.dialect;
    if (hot) {
      if (input.idempotencyKey !== undefined) {
        const existing = await this.#byIdempotencyKey(this.db, input.idempotencyKey);
        if (existing) return { row: existing, created: false, held: undefined };
      }
      const id = randomUUID();
      const k = await hot.enqueue(this.db, this.name, id, input, payload, at);
      const row = newOpRow(this.name, id, input, Number(k.next_seq), payload, at);
      return { row, created: true, held: k.state === 'blocked' };
    }
    return this.#tx(async (trx) => {
      if (input.idempotencyKey !== undefined) {
        const existing = await this.#byIdempotencyKey(trx, input.idempotencyKey);
        if (existing) return { row: existing, created: false, held: undefined };
      }
      const k = await this.dialect.upsertKey(
        trx,
        this.name,
        input.key,
        this.#keyUpsert(input.key, at),
      );
      const row = newOpRow(this.name, randomUUID(), input, Number(k.next_seq), payload, at);
      await trx.insertInto(OPS).values(row).execute();
      // `ready` with this op as the only pending one: the key was idle (or is new).
      if (k.state === 'ready' && Number(k.pending) === 1) await this.#announceWork(trx);
      return { row, created: true, held: k.state === 'blocked' };
    });
  }

  // ------------------------------------------------------------------ claims

  /** Whether to look for expired leases now: at most every `pollMs` (and half a lease). */
  #expiredCheckDue(leaseMs: number): boolean {
    return this.now() - this.#lastExpiredCheck >= Math.min(this.pollMs, leaseMs / 2);
  }

  /**
   * After the running op of `key` finished (not blocking): next op or idle. With `claim`, only
   * while that claim holds the key (fencing); false when it does not.
   */
  async #advanceKey(trx: Db, key: string, at: number, claim?: Claim): Promise<boolean> {
    let q = trx
      .updateTable(KEYS)
      .set({
        state: sql`case when pending > 0 then 'ready' else 'idle' end`,
        running_op: null,
        running_type: null,
        avail_at: 0,
        turn: at,
      })
      .where('queue', '=', this.name)
      .where('op_key', '=', key);
    if (claim) q = q.where(heldBy(this.name, [claim]));
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  /** Cancels every queued op of `key` (`cause`: the failed op's id, or `discard`). */
  async #cancelQueued(trx: Db, key: string, cause: string, at: number): Promise<OpInfo[]> {
    const rows = (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .orderBy('seq')
      .execute()) as OpRow[];
    if (rows.length === 0) return [];
    await trx
      .updateTable(OPS)
      .set({ status: 'cancelled', cancelled_by: cause, finished_at: at })
      .where('queue', '=', this.name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .execute();
    return rows.map((r) =>
      toInfo({ ...r, status: 'cancelled', cancelled_by: cause, finished_at: at }),
    );
  }

  /** Whether `claim` still holds its key (the key row is locked first). */
  async #holdsClaim(trx: Db, claim: Claim): Promise<boolean> {
    return holds(await this.#keyRow(trx, claim.op.key, true), claim);
  }

  /** Fails `row` for good: the key goes on (`continue`) or is blocked, its queue cancelled. */
  async #failOp(
    trx: Db,
    row: OpRow,
    error: SerializedError,
    stopKey: boolean,
    at: number,
  ): Promise<Completion> {
    await trx
      .updateTable(OPS)
      .set({ status: 'failed', error: JSON.stringify(error), finished_at: at })
      .where('id', '=', row.id)
      .execute();
    const op = toInfo({ ...row, status: 'failed', error: JSON.stringify(error), finished_at: at });
    if (!stopKey) {
      await this.#advanceKey(trx, row.op_key, at);
      return { op, cancelled: [], blocked: false };
    }
    const cancelled = await this.#cancelQueued(trx, row.op_key, row.id, at);
    await trx
      .updateTable(KEYS)
      .set({
        state: 'blocked',
        blocked_by: row.id,
        pending: 0,
        running_op: null,
        running_type: null,
      })
      .where('queue', '=', this.name)
      .where('op_key', '=', row.op_key)
      .execute();
    return { op, cancelled, blocked: true };
  }

  /**
   * Gives the claim of the op at the head of `k` (or `row`, the op it runs) to this worker: the
   * next fencing token, a lease, one more attempt. `reclaim` is set when the op was already
   * running under a claim whose lease expired (its expiry count goes up; the key stays `running`).
   */
  async #grant(
    trx: Db,
    k: KeyRow,
    row: OpRow | null,
    at: number,
    { leaseMs, workerId }: ClaimOptions,
    reclaim?: { expiries: number },
  ): Promise<Claim | undefined> {
    const token = nextToken(k.token);
    const set: GrantSet = {
      status: 'running',
      token,
      attempts: sql<number>`attempts + 1`,
      worker: workerId,
      started_at: at,
      ...(reclaim ? { expiries: reclaim.expiries } : {}),
    };
    let claimed: OpRow | undefined;
    if (row) {
      await trx.updateTable(OPS).set(set).where('id', '=', row.id).execute();
      claimed = { ...row, ...set, attempts: Number(row.attempts) + 1 } as OpRow;
    } else claimed = await this.dialect.claimHead(trx, this.name, k.op_key, set);
    if (!claimed) {
      // Nothing queued after all (the counter drifted): the key is idle.
      await trx
        .updateTable(KEYS)
        .set({ state: 'idle', pending: 0 })
        .where('queue', '=', this.name)
        .where('op_key', '=', k.op_key)
        .execute();
      return undefined;
    }
    await trx
      .updateTable(KEYS)
      .set(
        reclaim
          ? { token, lease_until: at + leaseMs, turn: at }
          : {
              state: 'running',
              running_op: claimed.id,
              running_type: claimed.type,
              token,
              lease_until: at + leaseMs,
              pending: sql`pending - 1`,
            },
      )
      .where('queue', '=', this.name)
      .where('op_key', '=', k.op_key)
      .execute();
    return { op: toInfo(claimed), token, announce: Number(claimed.announce) === 1 };
  }

  /** Keys in `state` whose turn came (expired leases, or ready ops), fairest first, locked. */
  async #pick(
    trx: Db,
    state: 'running' | 'ready',
    n: number,
    at: number,
    key: string | undefined,
  ): Promise<KeyRow[]> {
    let q = trx
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('state', '=', state);
    q = state === 'running' ? q.where('lease_until', '<', at) : q.where('avail_at', '<=', at);
    if (key !== undefined) q = q.where('op_key', '=', key);
    q = this.dialect.forUpdate(q.orderBy('turn').orderBy('op_key').limit(n), true);
    return (await q.execute()) as KeyRow[];
  }

  /**
   * Running keys whose claim's owner is provably gone (see `QueueDialect.owners`) although
   * their lease has not expired yet, at most `n`, locked. Looks at up to 1000 running keys.
   */
  async #pickGone(trx: Db, n: number, at: number, key: string | undefined): Promise<KeyRow[]> {
    const { owners } = this.dialect;
    if (!owners || n <= 0) return [];
    let q = trx
      .selectFrom(`${KEYS} as k`)
      .innerJoin(`${OPS} as o`, 'o.id', 'k.running_op')
      .select(['k.op_key as op_key', 'k.running_op as running_op', 'o.worker as worker'])
      .where('k.queue', '=', this.name)
      .where('k.state', '=', 'running')
      .where('k.lease_until', '>=', at);
    if (key !== undefined) q = q.where('k.op_key', '=', key);
    const rows = (await q.limit(1000).execute()) as {
      op_key: string;
      running_op: string;
      worker: string | null;
    }[];
    const tags = new Set<string>();
    for (const r of rows) {
      const tag = ownerTagOf(r.worker);
      if (tag !== undefined) tags.add(tag);
    }
    if (tags.size === 0) return [];
    const gone = await owners.gone(trx, [...tags]);
    const doomed = rows.filter((r) => gone.has(ownerTagOf(r.worker) ?? '')).slice(0, n);
    if (doomed.length === 0) return [];
    const locked = (await this.dialect
      .forUpdate(
        trx
          .selectFrom(KEYS)
          .selectAll()
          .where('queue', '=', this.name)
          .where('state', '=', 'running')
          .where(
            'op_key',
            'in',
            doomed.map((r) => r.op_key),
          )
          .orderBy('op_key'),
        true,
      )
      .execute()) as KeyRow[];
    // Still the claim judged gone (not finished or re-claimed meanwhile).
    const judged = new Map(doomed.map((r) => [r.op_key, r.running_op]));
    return locked.filter((k) => judged.get(k.op_key) === k.running_op);
  }

  /** Re-claims the op of an expired lease, or fails it as poison after too many expiries. */
  async #reclaim(trx: Db, k: KeyRow, at: number, options: ClaimOptions, out: Claimed) {
    const row = await this.#opRow(trx, k.running_op ?? '');
    if (!row || row.status !== 'running') {
      await this.#advanceKey(trx, k.op_key, at);
      return;
    }
    const expiries = Number(row.expiries) + 1;
    if (expiries >= options.maxLeaseExpiries) {
      const error: SerializedError = {
        name: 'QueueError',
        code: 'async-queue.poison',
        message: `op ${row.id} (${row.type}) lost its worker ${expiries} times (lease expired); failed as poison`,
      };
      await trx
        .updateTable(OPS)
        .set({ expiries, token: nextToken(row.token) })
        .where('id', '=', row.id)
        .execute();
      out.poisoned.push(await this.#failOp(trx, row, error, options.stopOnPoison, at));
      return;
    }
    const claim = await this.#grant(trx, k, row, at, options, { expiries });
    if (claim) out.claims.push(claim);
  }

  /** Claims within `trx`: expired leases first (looked for at most every `pollMs`), then ready keys. */
  async #claimWithin(trx: Db, options: ClaimOptions): Promise<Claimed> {
    const { limit, leaseMs, key } = options;
    const at = this.now();
    const out: Claimed = { claims: [], poisoned: [] };
    if (key !== undefined || this.#expiredCheckDue(leaseMs)) {
      this.#lastExpiredCheck = at;
      for (const k of await this.#pick(trx, 'running', limit, at, key)) {
        await this.#reclaim(trx, k, at, options, out);
      }
      const room = limit - out.claims.length;
      for (const k of await this.#pickGone(trx, room, at, key)) {
        await this.#reclaim(trx, k, at, options, out);
      }
    }
    if (out.claims.length < limit) {
      for (const k of await this.#pick(trx, 'ready', limit - out.claims.length, at, key)) {
        const claim = await this.#grant(trx, k, null, at, options);
        if (claim) out.claims.push(claim);
      }
    }
    return out;
  }

  /**
   * Claims from the rows of PostgreSQL's claim function. Keys picked there whose head op the
   * single statement could not claim go through the transactional path, one key at a time.
   */
  async #claimLeftovers(options: ChainOptions, rows: ClaimedRow[]): Promise<Claimed> {
    const out: Claimed = { claims: [], poisoned: [] };
    const unclaimed: string[] = [];
    for (const r of rows) {
      if (r.picked === null || r.picked === undefined) continue;
      if (r.id === null || r.id === undefined) unclaimed.push(r.picked);
      else {
        out.claims.push({
          op: toInfo(r),
          token: Number(r.token),
          announce: Number(r.announce) === 1,
        });
      }
    }
    for (const key of unclaimed) {
      const more = await this.#tx((trx) => this.#claimWithin(trx, { ...options, key, limit: 1 }));
      out.claims.push(...more.claims);
      out.poisoned.push(...more.poisoned);
    }
    return out;
  }

  /**
   * Claims up to `options.limit` ops (see `QueueBackend.claim`): one statement on PostgreSQL,
   * except when expired leases are due a look (at most every `pollMs`); else one transaction.
   */
  async claim(options: ClaimOptions): Promise<Claimed> {
    const { hot } = this.dialect;
    if (hot && options.key === undefined && !this.#expiredCheckDue(options.leaseMs)) {
      const at = this.now();
      const rows = await hot.claim(
        this.db,
        this.name,
        options.limit,
        at,
        at + options.leaseMs,
        options.workerId,
      );
      return this.#claimLeftovers(options, rows);
    }
    return this.#tx((trx) => this.#claimWithin(trx, options));
  }

  /**
   * Extends the leases of `claims` still held (one statement per 100 claims, PostgreSQL and
   * SQLite; one per claim on MySQL); returns those that are not held any more.
   */
  async heartbeat(claims: readonly Claim[], until: number): Promise<Set<Claim>> {
    const lost = new Set<Claim>();
    const held = (chunk: readonly Claim[]) => heldBy(this.name, chunk);
    for (let i = 0; i < claims.length; i += 100) {
      const chunk = claims.slice(i, i + 100);
      const rows = await this.dialect.extendLeases(this.db, this.name, chunk, until, held);
      const still = new Set(rows.map((r) => `${r.running_op}:${Number(r.token)}`));
      for (const c of chunk) if (!still.has(`${c.op.id}:${c.token}`)) lost.add(c);
    }
    return lost;
  }

  // ------------------------------------------------------------------ completions

  /**
   * Records a batch of successes, each fenced by its token, and claims the next fair ops for
   * those that asked (`next`): one statement on PostgreSQL (unless expired leases are due a
   * look); elsewhere one transaction, key rows locked in key order so that two batches cannot
   * deadlock. Results in the order of `items`; `undefined` where refused.
   */
  async succeedMany(
    items: SucceedItem[],
    next: ChainOptions | undefined,
  ): Promise<(Completion | undefined)[]> {
    const { hot } = this.dialect;
    if (hot && !(next && this.#expiredCheckDue(next.leaseMs))) {
      const at = this.now();
      const leaseUntil = at + (next?.leaseMs ?? 0);
      const r = await hot.succeedMany(
        this.db,
        this.name,
        items,
        at,
        leaseUntil,
        next?.workerId ?? '',
      );
      const out: (Completion | undefined)[] = [];
      let want = 0;
      for (const ord of r.ok) {
        const i = ord - 1;
        out[i] = succeeded(items[i]!, at);
        if (items[i]!.next) want++;
      }
      const chained = want > 0 && next ? await this.#claimLeftovers(next, r.rows) : undefined;
      return handOut(out, items, chained);
    }
    return this.#tx(async (trx) => {
      const at = this.now();
      const out: (Completion | undefined)[] = [];
      let want = 0;
      const order = items.map((_, i) => i);
      const keyOf = (i: number) => items[i]!.claim.op.key;
      order.sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : a - b));
      for (const i of order) {
        const it = items[i]!;
        const { claim } = it;
        // Advance the key only if this claim still holds it: one statement checks and locks.
        // The state always changes, so MySQL counts the row as updated.
        if (!(await this.#advanceKey(trx, claim.op.key, at, claim))) continue;
        await trx
          .updateTable(OPS)
          .set({ status: 'succeeded', result: it.text, error: null, finished_at: at })
          .where('id', '=', claim.op.id)
          .execute();
        if (claim.announce) await this.#announceDone(trx, [claim.op.id]);
        out[i] = succeeded(it, at);
        if (it.next) want++;
      }
      const chained =
        want > 0 && next ? await this.#claimWithin(trx, { ...next, limit: want }) : undefined;
      return handOut(out, items, chained);
    });
  }

  /** Records a failed attempt (see `QueueBackend.fail`); undefined when the claim is stale. */
  fail(
    claim: Claim,
    error: SerializedError,
    outcome: FailOutcome,
  ): Promise<Completion | undefined> {
    return this.#tx(async (trx) => {
      if (!(await this.#holdsClaim(trx, claim))) return undefined;
      const at = this.now();
      const row = (await this.#opRow(trx, claim.op.id))!;
      const text = JSON.stringify(error);
      if ('retryAt' in outcome) {
        await trx
          .updateTable(OPS)
          .set({ status: 'queued', error: text })
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
          .where('queue', '=', this.name)
          .where('op_key', '=', row.op_key)
          .execute();
        return {
          op: toInfo({ ...row, status: 'queued', error: text }),
          cancelled: [],
          blocked: false,
        };
      }
      const failed = await this.#failOp(trx, row, error, outcome.stop, at);
      if (claim.announce || failed.cancelled.length > 0) await this.#announceDone(trx, [row.id]);
      await this.#announceDone(
        trx,
        failed.cancelled.map((x) => x.id),
      );
      return failed;
    });
  }

  /**
   * Gives an unfinished op back (see `QueueBackend.release`): queued again at the head of its
   * key with the next fencing token, its attempt uncounted, runnable from `retryAt`.
   */
  release(claim: Claim, retryAt: number): Promise<boolean> {
    return this.#tx(async (trx) => {
      if (!(await this.#holdsClaim(trx, claim))) return false;
      const token = nextToken(claim.token);
      await trx
        .updateTable(OPS)
        .set({ status: 'queued', token, attempts: sql`attempts - 1` })
        .where('id', '=', claim.op.id)
        .execute();
      await trx
        .updateTable(KEYS)
        .set({
          state: 'ready',
          avail_at: retryAt,
          pending: sql`pending + 1`,
          running_op: null,
          running_type: null,
          token,
        })
        .where('queue', '=', this.name)
        .where('op_key', '=', claim.op.key)
        .execute();
      await this.#announceWork(trx);
      return true;
    });
  }

  /** Unblocks a blocked key; false when it was not blocked. */
  resume(key: string): Promise<boolean> {
    return this.#tx(async (trx) => {
      const k = await this.#keyRow(trx, key, true);
      if (!k || k.state !== 'blocked') return false;
      await trx
        .updateTable(KEYS)
        .set({ blocked_by: null, avail_at: 0, turn: this.now() })
        .set({ state: sql`case when pending > 0 then 'ready' else 'idle' end` })
        .where('queue', '=', this.name)
        .where('op_key', '=', key)
        .execute();
      await this.#announceWork(trx);
      return true;
    });
  }

  /** Cancels every queued op of the key and unblocks it; returns the cancelled ops. */
  discard(key: string): Promise<OpInfo[]> {
    return this.#tx(async (trx) => {
      const k = await this.#keyRow(trx, key, true);
      if (!k) return [];
      const ops = await this.#cancelQueued(trx, key, 'discard', this.now());
      await trx
        .updateTable(KEYS)
        .set({ pending: 0, blocked_by: null, state: k.state === 'running' ? 'running' : 'idle' })
        .where('queue', '=', this.name)
        .where('op_key', '=', key)
        .execute();
      await this.#announceDone(
        trx,
        ops.map((x) => x.id),
      );
      return ops;
    });
  }

  /** Deletes finished ops outside `retention`; returns how many. */
  async prune(retention: RetentionOptions): Promise<number> {
    const { db } = this;
    let n = 0;
    if (retention.maxAgeMs !== undefined) {
      const r = await db
        .deleteFrom(OPS)
        .where('queue', '=', this.name)
        .where('status', 'in', ['succeeded', 'cancelled', 'failed'])
        .where('finished_at', '<', this.now() - retention.maxAgeMs)
        .executeTakeFirst();
      n += Number(r.numDeletedRows);
    }
    if (retention.maxCount !== undefined) {
      const edge = (await db
        .selectFrom(OPS)
        .select('finished_at')
        .where('queue', '=', this.name)
        .where('status', 'in', ['succeeded', 'cancelled'])
        .orderBy('finished_at', 'desc')
        .limit(1)
        .offset(retention.maxCount)
        .executeTakeFirst()) as { finished_at: number | string } | undefined;
      if (edge) {
        const r = await db
          .deleteFrom(OPS)
          .where('queue', '=', this.name)
          .where('status', 'in', ['succeeded', 'cancelled'])
          .where('finished_at', '<=', Number(edge.finished_at))
          .executeTakeFirst();
        n += Number(r.numDeletedRows);
      }
    }
    return n;
  }
}
