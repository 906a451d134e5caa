// The SQL backend's shared, transactional statements: every dialect runs these (PostgreSQL only
// off its single-statement hot paths). Each change to a key's ops happens under its key row lock.
import { randomUUID } from 'node:crypto';
import type { SerializedError } from '@rigging/core';
import type { Database, Expression, ExpressionBuilder, SqlBool } from '@rigging/sql';
import { sql } from '../sql-peer.js';
import type { Claim, ClaimOptions, Completion, EnqueueInput } from '../backend.js';
import type { KeyStatus, OpInfo } from '../types.js';
import type {
  ChainOptions,
  Claimed,
  Enqueued,
  GrantSet,
  QueueDialect,
} from './dialects/dialect.js';
import { KEYS, OPS } from './names.js';
import { newOpRow, toInfo, type Db, type KeyRow, type OpRow } from './schema.js';
import { handOut, succeeded, type SucceedItem } from './succeed-batch.js';

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
  tx<T>(fn: (trx: Db) => Promise<T>): Promise<T> {
    return this.database.transaction(fn, { retries: 20 });
  }

  /** Tells other processes `payload` when `trx` commits (PostgreSQL; elsewhere a no-op). */
  notify(trx: Db, payload: string): Promise<void> {
    return this.dialect.notify(trx, payload);
  }

  /** The key's row, locked until the transaction ends when `lock` (and the dialect locks rows). */
  async keyRow(trx: Db, key: string, lock: boolean): Promise<KeyRow | undefined> {
    let q = trx
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('op_key', '=', key);
    if (lock) q = this.dialect.forUpdate(q, false);
    return (await q.executeTakeFirst()) as KeyRow | undefined;
  }

  /** The op's row, in any queue (callers check `queue`). */
  async opRow(trx: Db, id: string): Promise<OpRow | undefined> {
    return (await trx.selectFrom(OPS).selectAll().where('id', '=', id).executeTakeFirst()) as
      OpRow | undefined;
  }

  /** The op with this idempotency key in this queue, if any. */
  async byIdempotencyKey(trx: Db, idempotencyKey: string): Promise<OpRow | undefined> {
    return (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('idempotency_key', '=', idempotencyKey)
      .executeTakeFirst()) as OpRow | undefined;
  }

  /** Whether to look for expired leases now: at most every `pollMs` (and half a lease). */
  expiredCheckDue(leaseMs: number): boolean {
    return this.now() - this.#lastExpiredCheck >= Math.min(this.pollMs, leaseMs / 2);
  }

  /** The key's head op (its oldest queued one), if any. */
  async headOp(trx: Db, key: string): Promise<OpRow | undefined> {
    return (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('op_key', '=', key)
      .where('status', '=', 'queued')
      .orderBy('seq')
      .limit(1)
      .executeTakeFirst()) as OpRow | undefined;
  }

  /** Nothing queued after all (the counter drifted): the key is idle. */
  async markIdle(trx: Db, key: string): Promise<void> {
    await trx
      .updateTable(KEYS)
      .set({ state: 'idle', pending: 0 })
      .where('queue', '=', this.name)
      .where('op_key', '=', key)
      .execute();
  }

  /**
   * After the running op of `key` finished (not blocking): next op or idle. With `claim`, only
   * while that claim holds the key (fencing token); false when it does not.
   */
  async advanceKey(trx: Db, key: string, at: number, claim?: Claim): Promise<boolean> {
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
    if (claim) {
      q = q
        .where('state', '=', 'running')
        .where('running_op', '=', claim.op.id)
        .where('token', '=', claim.token);
    }
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) > 0;
  }

  /** Cancels every queued op of `key` (`cause`: the failed op's id, or `discard`). */
  async cancelQueued(trx: Db, key: string, cause: string, at: number): Promise<OpInfo[]> {
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

  /** Checks the fencing token on the key row (locked first, then the op). */
  async holdsClaim(trx: Db, claim: Claim): Promise<boolean> {
    const k = await this.keyRow(trx, claim.op.key, true);
    return (
      !!k &&
      k.state === 'running' &&
      k.running_op === claim.op.id &&
      Number(k.token) === claim.token
    );
  }

  /** Fails `row` for good: the key goes on (`continue`) or is blocked, its queue cancelled. */
  async failOp(
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
      await this.advanceKey(trx, row.op_key, at);
      return { op, cancelled: [], blocked: false };
    }
    const cancelled = await this.cancelQueued(trx, row.op_key, row.id, at);
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

  /** The public status of a key row (`queued`, `<type>-in-progress`, `blocked`, `idle`). */
  async statusOf(trx: Db, k: KeyRow | undefined): Promise<KeyStatus> {
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

  /** Gives `row` to a worker with `set` (one UPDATE by id); returns the row as updated. */
  async claimById(trx: Db, row: OpRow, set: GrantSet): Promise<OpRow> {
    await trx.updateTable(OPS).set(set).where('id', '=', row.id).execute();
    return { ...row, ...set, attempts: Number(row.attempts) + 1 } as OpRow;
  }

  /** Gives the head op of `key` to a worker with `set` in one UPDATE … RETURNING. */
  async claimHeadReturning(trx: Db, key: string, set: GrantSet): Promise<OpRow | undefined> {
    return (await trx
      .updateTable(OPS)
      .set(set)
      .where(
        'id',
        '=',
        trx
          .selectFrom(OPS)
          .select('id')
          .where('queue', '=', this.name)
          .where('op_key', '=', key)
          .where('status', '=', 'queued')
          .orderBy('seq')
          .limit(1),
      )
      .returningAll()
      .executeTakeFirst()) as OpRow | undefined;
  }

  /**
   * Gives the claim of the op at the head of `k` (or `row`, the op it runs) to this worker: a
   * fresh token (the fencing token), a lease, one more attempt. `reclaim` is set when the op was
   * already running under a claim whose lease expired (its expiry count goes up; the key stays
   * `running`).
   */
  async grant(
    trx: Db,
    k: KeyRow,
    row: OpRow | null,
    at: number,
    { leaseMs, workerId }: ClaimOptions,
    reclaim?: { expiries: number },
  ): Promise<Claim | undefined> {
    const token = Number(k.token) + 1;
    const set: GrantSet = {
      status: 'running',
      token,
      attempts: sql<number>`attempts + 1`,
      worker: workerId,
      started_at: at,
      ...(reclaim ? { expiries: reclaim.expiries } : {}),
    };
    const claimed = row
      ? await this.claimById(trx, row, set)
      : await this.dialect.claimHead(this, trx, k, set);
    if (!claimed) {
      await this.markIdle(trx, k.op_key);
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

  /** Re-claims the op of an expired lease, or fails it as poison after too many expiries. */
  async #reclaim(trx: Db, k: KeyRow, at: number, options: ClaimOptions, out: Claimed) {
    const row = await this.opRow(trx, k.running_op ?? '');
    if (!row || row.status !== 'running') {
      await this.advanceKey(trx, k.op_key, at);
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
        .set({ expiries, token: sql`token + 1` })
        .where('id', '=', row.id)
        .execute();
      out.poisoned.push(await this.failOp(trx, row, error, options.stopOnPoison, at));
      return;
    }
    const claim = await this.grant(trx, k, row, at, options, { expiries });
    if (claim) out.claims.push(claim);
  }

  /** Claims within `trx`: expired leases first (looked for at most every `pollMs`), then ready keys. */
  async claimWithin(trx: Db, options: ClaimOptions): Promise<Claimed> {
    const { limit, leaseMs, key } = options;
    const at = this.now();
    const out: Claimed = { claims: [], poisoned: [] };
    if (key !== undefined || this.expiredCheckDue(leaseMs)) {
      this.#lastExpiredCheck = at;
      for (const k of await this.#pick(trx, 'running', limit, at, key)) {
        await this.#reclaim(trx, k, at, options, out);
      }
    }
    if (out.claims.length < limit) {
      for (const k of await this.#pick(trx, 'ready', limit - out.claims.length, at, key)) {
        const claim = await this.grant(trx, k, null, at, options);
        if (claim) out.claims.push(claim);
      }
    }
    return out;
  }

  /**
   * The key row's changes when an op is counted in: one more pending op, and an idle key readied
   * with a new turn. SET expressions are ordered for MySQL, which evaluates them left to right
   * with the updated values.
   */
  keyBump(at: number) {
    const K = (c: string) => sql.ref(`${KEYS}.${c}`);
    const wasIdle = sql`${K('state')} = 'idle'`;
    return {
      next_seq: sql<number>`${K('next_seq')} + 1`,
      pending: sql<number>`${K('pending')} + 1`,
      avail_at: sql<number>`case when ${wasIdle} then 0 else ${K('avail_at')} end`,
      turn: sql<number>`case when ${wasIdle} then ${at} else ${K('turn')} end`,
      state: sql<string>`case when ${wasIdle} then 'ready' else ${K('state')} end`,
    };
  }

  /** The key row of a first op. */
  newKeyRow(key: string, at: number) {
    return {
      queue: this.name,
      op_key: key,
      state: 'ready',
      next_seq: 1,
      pending: 1,
      avail_at: 0,
      turn: at,
    };
  }

  /** `upsertKey` with INSERT … ON CONFLICT … RETURNING (PostgreSQL, SQLite ≥ 3.35). */
  async upsertKeyReturning(trx: Db, key: string, at: number) {
    return (await trx
      .insertInto(KEYS)
      .values(this.newKeyRow(key, at))
      .onConflict((oc) => oc.columns(['queue', 'op_key']).doUpdateSet(this.keyBump(at)))
      .returning(['state', 'next_seq', 'pending'])
      .executeTakeFirstOrThrow()) as Pick<KeyRow, 'state' | 'next_seq' | 'pending'>;
  }

  /**
   * Stores an op in one transaction: the idempotency key is looked up, one upsert counts the op
   * in and readies an idle key (and locks the key row, which serializes enqueues of one key),
   * and workers are woken when the key was idle.
   */
  enqueueTx(input: EnqueueInput, payload: string, at: number): Promise<Enqueued> {
    return this.tx(async (trx) => {
      if (input.idempotencyKey !== undefined) {
        const existing = await this.byIdempotencyKey(trx, input.idempotencyKey);
        if (existing) return { row: existing, created: false, held: undefined };
      }
      const k = await this.dialect.upsertKey(this, trx, input.key, at);
      const row = newOpRow(this.name, randomUUID(), input, Number(k.next_seq), payload, at);
      await trx.insertInto(OPS).values(row).execute();
      // `ready` with this op as the only pending one: the key was idle (or is new).
      if (k.state === 'ready' && Number(k.pending) === 1) await this.notify(trx, `n:${this.name}`);
      return { row, created: true, held: k.state === 'blocked' };
    });
  }

  /** Claims in a transaction (see `QueueBackend.claim`). */
  claimTx(options: ClaimOptions): Promise<Claimed> {
    return this.tx((trx) => this.claimWithin(trx, options));
  }

  /** Held by these claims (fencing token) and still running: the heartbeat's condition. */
  stillHeld(claims: readonly Claim[]) {
    return (eb: ExpressionBuilder<any, any>): Expression<SqlBool> =>
      eb.and([
        eb('queue', '=', this.name),
        eb('state', '=', 'running'),
        eb.or(
          claims.map((c) =>
            eb.and([
              eb('op_key', '=', c.op.key),
              eb('running_op', '=', c.op.id),
              eb('token', '=', c.token),
            ]),
          ),
        ),
      ]);
  }

  /**
   * Heartbeat by UPDATE … RETURNING, one statement per 100 claims: each lease is extended only
   * while its claim holds the key; a claim whose row did not come back is lost. `update` runs
   * one chunk's statement (PostgreSQL locks the rows in key order first).
   */
  async heartbeatReturning(
    claims: readonly Claim[],
    update: (chunk: readonly Claim[]) => Promise<{ running_op: string; token: number | string }[]>,
  ): Promise<Set<Claim>> {
    const lost = new Set<Claim>();
    for (let i = 0; i < claims.length; i += 100) {
      const chunk = claims.slice(i, i + 100);
      const rows = await update(chunk);
      const held = new Set(rows.map((r) => `${r.running_op}:${Number(r.token)}`));
      for (const c of chunk) if (!held.has(`${c.op.id}:${c.token}`)) lost.add(c);
    }
    return lost;
  }

  /**
   * Records a batch of successes in one transaction (key rows locked in key order, so that two
   * batches cannot deadlock) and claims the next fair keys in the same transaction.
   */
  succeedManyTx(
    items: SucceedItem[],
    next: ChainOptions | undefined,
  ): Promise<(Completion | undefined)[]> {
    return this.tx(async (trx) => {
      const at = this.now();
      const out: (Completion | undefined)[] = [];
      let want = 0;
      const order = items.map((_, i) => i);
      const keyOf = (i: number) => items[i]!.claim.op.key;
      order.sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : a - b));
      for (const i of order) {
        const it = items[i]!;
        const { claim } = it;
        // Advance the key only if this claim still holds it (fencing token): one statement
        // checks and locks. The state always changes, so MySQL counts the row as updated.
        if (!(await this.advanceKey(trx, claim.op.key, at, claim))) continue;
        await trx
          .updateTable(OPS)
          .set({ status: 'succeeded', result: it.text, error: null, finished_at: at })
          .where('id', '=', claim.op.id)
          .execute();
        if (claim.announce) await this.notify(trx, `d:${this.name}:${claim.op.id}`);
        out[i] = succeeded(it, at);
        if (it.next) want++;
      }
      const chained =
        want > 0 && next ? await this.claimWithin(trx, { ...next, limit: want }) : undefined;
      return handOut(out, items, chained);
    });
  }
}
