// Claims and fencing: which keys' turn came (ready ops, expired leases, owners gone), the grant
// of an op with the next fencing token and a lease, and lease extensions while the token holds.
// Owns the one piece of state of the store: when expired leases were last looked for.
import type { SerializedError } from '@rigging/core';
import { sql } from '../sql-peer.js';
import type { Claim, ClaimOptions } from '../backend.js';
import { advanceKey, failOp } from './finish.js';
import { heldBy, nextToken } from './fence.js';
import { ownerTagOf } from './owner.js';
import { KEYS, OPS } from './names.js';
import { claimedAt, toInfo, type Db, type KeyRow, type OpRow } from './rows.js';
import type { QueueTables } from './tables.js';
import type { ChainOptions, Claimed, ClaimedRow } from './types.js';

/** The claim of a claim function's row that holds an op (PostgreSQL). @internal */
export function claimOfRow(row: ClaimedRow): Claim {
  return {
    op: toInfo(claimedAt(row, row.running_since)),
    token: Number(row.token),
    announce: Number(row.announce) === 1,
  };
}

/** The claims of one queue's ops. @internal */
export class QueueClaims {
  readonly #tables: QueueTables;
  readonly #pollMs: number;
  #lastExpiredCheck = 0;

  constructor(tables: QueueTables, pollMs: number) {
    this.#tables = tables;
    this.#pollMs = pollMs;
  }

  /** Whether to look for expired leases now: at most every `pollMs` (and half a lease). */
  expiredCheckDue(leaseMs: number): boolean {
    return this.#tables.now() - this.#lastExpiredCheck >= Math.min(this.#pollMs, leaseMs / 2);
  }

  /**
   * Claims up to `options.limit` ops (see `QueueBackend.claim`): one statement on PostgreSQL,
   * except when expired leases are due a look (at most every `pollMs`); else one transaction.
   */
  async claim(options: ClaimOptions): Promise<Claimed> {
    const { hot } = this.#tables.dialect;
    if (hot && options.key === undefined && !this.expiredCheckDue(options.leaseMs)) {
      const at = this.#tables.now();
      const { rows, due } = await hot.claim(
        this.#tables.db,
        this.#tables.name,
        options.limit,
        at,
        at + options.leaseMs,
        options.workerId,
      );
      return { ...(await this.claimLeftovers(options, rows)), due };
    }
    return this.#tables.tx((trx) => this.claimWithin(trx, options));
  }

  /**
   * Extends the leases of `claims` still held (one statement per 100 claims, PostgreSQL and
   * SQLite; one per claim on MySQL); returns those that are not held any more.
   */
  async heartbeat(claims: readonly Claim[], until: number): Promise<Set<Claim>> {
    const lost = new Set<Claim>();
    const held = (chunk: readonly Claim[]) => heldBy(this.#tables.name, chunk);
    for (let i = 0; i < claims.length; i += 100) {
      const chunk = claims.slice(i, i + 100);
      const rows = await this.#tables.dialect.extendLeases(
        this.#tables.db,
        this.#tables.name,
        chunk,
        until,
        held,
      );
      const still = new Set(rows.map((r) => `${r.running_op}:${Number(r.token)}`));
      for (const c of chunk) if (!still.has(`${c.op.id}:${c.token}`)) lost.add(c);
    }
    return lost;
  }

  /**
   * Claims within `trx`: expired leases first (looked for at most every `pollMs`), then ready
   * keys. Also the chained claims of a batch of successes (`QueueOutcomes.succeedMany`).
   */
  async claimWithin(trx: Db, options: ClaimOptions): Promise<Claimed> {
    const { limit, leaseMs, key } = options;
    const at = this.#tables.now();
    const out: Claimed = { claims: [], poisoned: [] };
    if (key !== undefined || this.expiredCheckDue(leaseMs)) {
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
        const claim = await this.#grant(trx, k, at, options);
        if (claim) out.claims.push(claim);
      }
    }
    return out;
  }

  /**
   * Claims from the rows of PostgreSQL's claim function. Keys picked there whose head op the
   * single statement could not claim go through the transactional path, one key at a time.
   */
  async claimLeftovers(options: ChainOptions, rows: ClaimedRow[]): Promise<Claimed> {
    const out: Claimed = { claims: [], poisoned: [] };
    const unclaimed: string[] = [];
    for (const r of rows) {
      if (r.picked === null || r.picked === undefined) continue;
      if (r.id === null || r.id === undefined) unclaimed.push(r.picked);
      else out.claims.push(claimOfRow(r));
    }
    for (const key of unclaimed) {
      const more = await this.#tables.tx((trx) =>
        this.claimWithin(trx, { ...options, key, limit: 1 }),
      );
      out.claims.push(...more.claims);
      out.poisoned.push(...more.poisoned);
    }
    return out;
  }

  /**
   * Gives the claim of the op at the head of `k` to this worker: the next fencing token, a lease,
   * one more attempt, all on the key row (the op's row stays as it is: see `asRunning`).
   * `reclaim` is set when the key already runs `reclaim.row` under a claim whose lease expired:
   * the lost attempt is counted on the op's row with its expiry, and the key stays `running`.
   */
  async #grant(
    trx: Db,
    k: KeyRow,
    at: number,
    { leaseMs, workerId }: ClaimOptions,
    reclaim?: { row: OpRow; expiries: number },
  ): Promise<Claim | undefined> {
    const token = nextToken(k.token);
    const { headOp, keyReclaimed, keyTaken } = this.#tables.statements;
    const key = {
      queue: this.#tables.name,
      key: k.op_key,
      token,
      leaseUntil: at + leaseMs,
      worker: workerId,
      at,
    };
    let claimed: OpRow | undefined;
    if (reclaim) {
      const { row, expiries } = reclaim;
      await trx
        .updateTable(OPS)
        .set({ expiries, attempts: sql<number>`attempts + 1` })
        .where('id', '=', row.id)
        .execute();
      await keyReclaimed.execute(trx, key);
      claimed = { ...row, expiries, attempts: Number(row.attempts) + 1 };
    } else {
      const { rows } = await headOp.execute(trx, { queue: key.queue, key: key.key });
      claimed = rows[0] as OpRow | undefined;
      if (!claimed) {
        // Nothing queued after all (the counter drifted): the key is idle.
        await trx
          .updateTable(KEYS)
          .set({ state: 'idle', pending: 0 })
          .where('queue', '=', this.#tables.name)
          .where('op_key', '=', k.op_key)
          .execute();
        return undefined;
      }
      await keyTaken.execute(trx, {
        ...key,
        op: claimed.id,
        type: claimed.type,
        seq: Number(claimed.seq),
      });
    }
    return { op: toInfo(claimedAt(claimed, at)), token, announce: Number(claimed.announce) === 1 };
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
      .where('queue', '=', this.#tables.name)
      .where('state', '=', state);
    q = state === 'running' ? q.where('lease_until', '<', at) : q.where('avail_at', '<=', at);
    if (key !== undefined) q = q.where('op_key', '=', key);
    q = this.#tables.dialect.forUpdate(q.orderBy('turn').orderBy('op_key').limit(n), true);
    return (await q.execute()) as KeyRow[];
  }

  /**
   * Running keys whose claim's owner is provably gone (see `QueueDialect.owners`) although
   * their lease has not expired yet, at most `n`, locked. Looks at up to 1000 running keys.
   */
  async #pickGone(trx: Db, n: number, at: number, key: string | undefined): Promise<KeyRow[]> {
    const { owners } = this.#tables.dialect;
    if (!owners || n <= 0) return [];
    let q = trx
      .selectFrom(KEYS)
      .select(['op_key', 'running_op', 'running_worker as worker'])
      .where('queue', '=', this.#tables.name)
      .where('state', '=', 'running')
      .where('lease_until', '>=', at);
    if (key !== undefined) q = q.where('op_key', '=', key);
    q = q.limit(1000);
    if (owners.lockingRead) q = this.#tables.dialect.forUpdate(q, true);
    const rows = (await q.execute()) as {
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
    const locked = (await this.#tables.dialect
      .forUpdate(
        trx
          .selectFrom(KEYS)
          .selectAll()
          .where('queue', '=', this.#tables.name)
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
    const row = await this.#tables.opRow(trx, k.running_op ?? '');
    if (!row || row.status !== 'queued') {
      await advanceKey(this.#tables, trx, k.op_key, at);
      return;
    }
    const expiries = Number(row.expiries) + 1;
    if (expiries >= options.maxLeaseExpiries) {
      const error: SerializedError = {
        name: 'QueueError',
        code: 'async-queue.poison',
        message: `op ${row.id} (${row.type}) lost its worker ${expiries} times (lease expired); failed as poison`,
      };
      await trx.updateTable(OPS).set({ expiries }).where('id', '=', row.id).execute();
      const attempt = { ...row, expiries, started_at: k.running_since ?? null };
      out.poisoned.push(await failOp(this.#tables, trx, attempt, error, options.stopOnPoison, at));
      return;
    }
    const claim = await this.#grant(trx, k, at, options, { row, expiries });
    if (claim) out.claims.push(claim);
  }
}
