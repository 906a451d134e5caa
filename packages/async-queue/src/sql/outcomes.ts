// What becomes of a claimed op: succeeded (in batches, chaining the next claims), failed (retried
// later, or for good), given back; and what an operator does to a key: resume it, discard it.
// Every change is fenced by the claim's token (see `fence.ts`).
import type { SerializedError } from '@rigging/core';
import { sql } from '../sql-peer.js';
import type { Claim, Completion, FailOutcome } from '../backend.js';
import type { OpInfo } from '../types.js';
import type { QueueClaims } from './claims.js';
import { advanceKey, cancelQueued, failOp } from './finish.js';
import { holds, nextToken } from './fence.js';
import { KEYS, OPS } from './names.js';
import { toInfo, type Db } from './rows.js';
import type { QueueTables } from './tables.js';
import type { ChainOptions, Claimed, SucceedItem } from './types.js';

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

/** The outcomes of one queue's claims, and the operator's changes to its keys. @internal */
export class QueueOutcomes {
  readonly #tables: QueueTables;
  readonly #claims: QueueClaims;

  constructor(tables: QueueTables, claims: QueueClaims) {
    this.#tables = tables;
    this.#claims = claims;
  }

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
    const { hot } = this.#tables.dialect;
    if (hot && !(next && this.#claims.expiredCheckDue(next.leaseMs))) {
      const at = this.#tables.now();
      const leaseUntil = at + (next?.leaseMs ?? 0);
      const r = await hot.succeedMany(
        this.#tables.db,
        this.#tables.name,
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
      const chained =
        want > 0 && next ? await this.#claims.claimLeftovers(next, r.rows) : undefined;
      return handOut(out, items, chained);
    }
    return this.#tables.tx(async (trx) => {
      const at = this.#tables.now();
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
        if (!(await advanceKey(this.#tables, trx, claim.op.key, at, claim))) continue;
        await this.#tables.statements.opSucceeded.execute(trx, {
          id: claim.op.id,
          result: it.text,
          at,
          startedAt: claim.op.startedAt ?? at,
          token: claim.token,
        });
        if (claim.announce) await this.#tables.announceDone(trx, [claim.op.id]);
        out[i] = succeeded(it, at);
        if (it.next) want++;
      }
      const chained =
        want > 0 && next
          ? await this.#claims.claimWithin(trx, { ...next, limit: want })
          : undefined;
      return handOut(out, items, chained);
    });
  }

  /** Records a failed attempt (see `QueueBackend.fail`); undefined when the claim is stale. */
  fail(
    claim: Claim,
    error: SerializedError,
    outcome: FailOutcome,
  ): Promise<Completion | undefined> {
    return this.#tables.tx(async (trx) => {
      if (!(await this.#holdsClaim(trx, claim))) return undefined;
      const at = this.#tables.now();
      // The op's row, with the start of the attempt that ends here.
      const row = {
        ...(await this.#tables.opRow(trx, claim.op.id))!,
        started_at: claim.op.startedAt ?? at,
      };
      const text = JSON.stringify(error);
      if ('retryAt' in outcome) {
        const retried = { error: text, started_at: row.started_at };
        await trx
          .updateTable(OPS)
          .set({ ...retried, attempts: sql<number>`attempts + 1` })
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
          .where('queue', '=', this.#tables.name)
          .where('op_key', '=', row.op_key)
          .execute();
        return {
          op: toInfo({ ...row, ...retried, attempts: Number(row.attempts) + 1 }),
          cancelled: [],
          blocked: false,
        };
      }
      const failed = await failOp(this.#tables, trx, row, error, outcome.stop, at);
      if (claim.announce || failed.cancelled.length > 0)
        await this.#tables.announceDone(trx, [row.id]);
      await this.#tables.announceDone(
        trx,
        failed.cancelled.map((x) => x.id),
      );
      return failed;
    });
  }

  /**
   * Gives an unfinished op back (see `QueueBackend.release`): queued again at the head of its
   * key with the next fencing token, its attempt uncounted, runnable from `retryAt`. Only the key
   * row changes: the op's row was never written for the attempt.
   */
  release(claim: Claim, retryAt: number): Promise<boolean> {
    return this.#tables.tx(async (trx) => {
      if (!(await this.#holdsClaim(trx, claim))) return false;
      const token = nextToken(claim.token);
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
        .where('queue', '=', this.#tables.name)
        .where('op_key', '=', claim.op.key)
        .execute();
      await this.#tables.announceWork(trx);
      return true;
    });
  }

  /** Unblocks a blocked key; false when it was not blocked. */
  resume(key: string): Promise<boolean> {
    return this.#tables.tx(async (trx) => {
      const k = await this.#tables.keyRow(trx, key, true);
      if (!k || k.state !== 'blocked') return false;
      await trx
        .updateTable(KEYS)
        .set({ blocked_by: null, avail_at: 0, turn: this.#tables.now() })
        .set({ state: sql`case when pending > 0 then 'ready' else 'idle' end` })
        .where('queue', '=', this.#tables.name)
        .where('op_key', '=', key)
        .execute();
      await this.#tables.announceWork(trx);
      return true;
    });
  }

  /** Cancels every queued op of the key and unblocks it; returns the cancelled ops. */
  discard(key: string): Promise<OpInfo[]> {
    return this.#tables.tx(async (trx) => {
      const k = await this.#tables.keyRow(trx, key, true);
      if (!k) return [];
      const running = k.state === 'running' ? k.running_op : null;
      const ops = await cancelQueued(
        this.#tables,
        trx,
        key,
        'discard',
        this.#tables.now(),
        running,
      );
      await trx
        .updateTable(KEYS)
        .set({ pending: 0, blocked_by: null, state: k.state === 'running' ? 'running' : 'idle' })
        .where('queue', '=', this.#tables.name)
        .where('op_key', '=', key)
        .execute();
      await this.#tables.announceDone(
        trx,
        ops.map((x) => x.id),
      );
      return ops;
    });
  }

  /** Whether `claim` still holds its key (the key row is locked first). */
  async #holdsClaim(trx: Db, claim: Claim): Promise<boolean> {
    return holds(await this.#tables.keyRow(trx, claim.op.key, true), claim);
  }
}
