import { randomUUID } from 'node:crypto';
import type { Clock } from '@rigging/core';
import type { Session } from '@rigging/sql';
import { sql } from '../../sql-peer.js';
import type { Claim, ClaimOptions, Completion, EnqueueInput } from '../../backend.js';
import { CHANNEL, CLAIM_FN, ENQUEUE_FN, KEYS, SUCCEED_MANY_FN } from '../names.js';
import { newOpRow, toInfo, type Db, type KeyRow, type OpRow } from '../schema.js';
import type { QueueStore } from '../store.js';
import { handOut, succeeded, type SucceedItem } from '../succeed-batch.js';
import type {
  ChainOptions,
  Claimed,
  Enqueued,
  GrantSet,
  LockableQuery,
  QueueDialect,
  RemoteEvents,
} from './dialect.js';

/** A row of the claim functions: `picked` (a locked key) and its claimed head op, if any. */
type ClaimedRow = OpRow & { picked: string | null };

/** A `json` column, which drivers return parsed or as text. */
const json = <T>(value: unknown): T => (typeof value === 'string' ? JSON.parse(value) : value) as T;

/**
 * PostgreSQL: row locks with `FOR UPDATE SKIP LOCKED`, wake-ups by `LISTEN/NOTIFY`, and the hot
 * operations (enqueue, claim, a batch of successes) as single statements in autocommit calling
 * the functions of `pg-functions.ts`: one round trip instead of five to seven (BEGIN, statements,
 * COMMIT). Locks are taken in the same order as the transactional paths (key row, then op rows).
 * Under READ COMMITTED one statement sees one snapshot, so the claim re-checks op status on
 * update and leaves anything unusual to the transactional path.
 * @internal
 */
export class PostgresDialect implements QueueDialect {
  readonly name = 'postgres';
  readonly defaultPollMs = 2000;

  constructor(
    /** LISTEN/NOTIFY wake-ups (else every process polls). */
    readonly pushes: boolean,
  ) {}

  forUpdate<Q extends LockableQuery<Q>>(query: Q, skipLocked: boolean): Q {
    return skipLocked ? query.forUpdate().skipLocked() : query.forUpdate();
  }

  async notify(trx: Db, payload: string): Promise<void> {
    await sql`select pg_notify(${CHANNEL}, ${payload})`.execute(trx);
  }

  upsertKey(store: QueueStore, trx: Db, key: string, at: number) {
    return store.upsertKeyReturning(trx, key, at);
  }

  claimHead(store: QueueStore, trx: Db, k: KeyRow, set: GrantSet): Promise<OpRow | undefined> {
    return store.claimHeadReturning(trx, k.op_key, set);
  }

  /** One statement (no idempotency key check there), after a look-up when a key is given. */
  async enqueue(
    store: QueueStore,
    input: EnqueueInput,
    payload: string,
    at: number,
  ): Promise<Enqueued> {
    if (input.idempotencyKey !== undefined) {
      const existing = await store.byIdempotencyKey(store.db, input.idempotencyKey);
      if (existing) return { row: existing, created: false, held: undefined };
    }
    const id = randomUUID();
    const { rows } = await sql<{ j: unknown }>`
      select ${sql.raw(ENQUEUE_FN)}(${store.name}, ${input.key}, ${id}, ${input.type}, ${payload},
        ${input.idempotencyKey ?? null}::text, ${input.waited ? 1 : 0}, ${at}) as j
    `.execute(store.db);
    const k = json<{ state: string; next_seq: number | string }>(rows[0]!.j);
    const row = newOpRow(store.name, id, input, Number(k.next_seq), payload, at);
    return { row, created: true, held: k.state === 'blocked' };
  }

  /** One statement, except when expired leases are due a look (at most every `pollMs`). */
  async claim(store: QueueStore, options: ClaimOptions): Promise<Claimed> {
    if (options.key !== undefined || store.expiredCheckDue(options.leaseMs)) {
      return store.claimTx(options);
    }
    const at = store.now();
    const { rows } = await sql<{ j: unknown }>`
      select ${sql.raw(CLAIM_FN)}(${store.name}, ${options.limit}, ${at},
        ${at + options.leaseMs}, ${options.workerId}) as j
    `.execute(store.db);
    return claimLeftovers(
      store,
      options,
      rows.map((r) => json<ClaimedRow>(r.j)),
    );
  }

  /**
   * The key rows are locked in key order first, as every other statement that locks several keys
   * does (a batch of successes), so the two cannot deadlock (one plain UPDATE locks rows in scan
   * order; each such deadlock cost a second and a statement).
   */
  heartbeat(store: QueueStore, claims: readonly Claim[], until: number): Promise<Set<Claim>> {
    return store.heartbeatReturning(
      claims,
      async (chunk) =>
        (await store.db
          .with('l', (qb) =>
            qb
              .selectFrom(KEYS)
              .select('op_key')
              .where(store.stillHeld(chunk))
              .orderBy('op_key')
              .forUpdate(),
          )
          .updateTable(KEYS)
          .set({ lease_until: until })
          .from('l')
          .whereRef(`${KEYS}.op_key`, '=', 'l.op_key')
          .where(`${KEYS}.queue`, '=', store.name)
          .returning([`${KEYS}.running_op`, `${KEYS}.token`])
          .execute()) as { running_op: string; token: number | string }[],
    );
  }

  /**
   * One statement: every success of the batch (each fenced) and the chained claims. A chained
   * claim that should also look for expired leases takes the transactional path.
   */
  async succeedMany(
    store: QueueStore,
    items: SucceedItem[],
    next: ChainOptions | undefined,
  ): Promise<(Completion | undefined)[]> {
    if (next && store.expiredCheckDue(next.leaseMs)) return store.succeedManyTx(items, next);
    const at = store.now();
    const { name } = store;
    const { rows } = await sql<{ j: unknown }>`
      select ${sql.raw(SUCCEED_MANY_FN)}(${name},
        ${items.map((it) => it.claim.op.key)}::text[],
        ${items.map((it) => it.claim.op.id)}::text[],
        ${items.map((it) => it.claim.token)}::integer[],
        ${items.map((it) => it.text)}::text[],
        ${items.map((it) => (it.claim.announce ? `d:${name}:${it.claim.op.id}` : null))}::text[],
        ${items.map((it) => it.next !== undefined)}::boolean[],
        ${at}, ${at + (next?.leaseMs ?? 0)}, ${next?.workerId ?? ''}) as j
    `.execute(store.db);
    const parsed = rows.map((r) => json<unknown>(r.j));
    const head = parsed.shift() as { ok: (number | string)[] } | undefined;
    const out: (Completion | undefined)[] = [];
    let want = 0;
    for (const ord of head?.ok ?? []) {
      const i = Number(ord) - 1;
      out[i] = succeeded(items[i]!, at);
      if (items[i]!.next) want++;
    }
    const chained =
      want > 0 && next ? await claimLeftovers(store, next, parsed as ClaimedRow[]) : undefined;
    return handOut(out, items, chained);
  }

  /**
   * Keeps a `LISTEN` session open until `signal` aborts, reconnecting with growing waits (at most
   * 10 s) when it is lost; workers poll meanwhile. Every wait ends at once when `signal` aborts.
   */
  async listen(
    store: QueueStore,
    events: RemoteEvents,
    signal: AbortSignal,
    clock: Clock,
  ): Promise<void> {
    const { name } = store;
    let failures = 0;
    while (!signal.aborted) {
      let session: Session | undefined;
      try {
        session = await store.database.session();
        await session.query(`LISTEN ${CHANNEL}`);
        failures = 0;
        session.onNotification((n) => {
          const p = n.payload ?? '';
          if (p === `n:${name}`) events.wake();
          else if (p.startsWith(`d:${name}:`)) events.settled(p.slice(name.length + 3));
        });
        events.wake();
        await untilEither(session.lost, signal);
        if (!signal.aborted)
          events.warn(undefined, 'async-queue LISTEN session lost; reconnecting');
      } catch (err) {
        failures++;
        events.warn(err, 'async-queue LISTEN failed; polling meanwhile');
      }
      await session?.close().catch(() => {});
      if (signal.aborted) return;
      await clock
        .sleep(Math.min(10_000, 200 * 2 ** Math.min(failures, 6)), { signal })
        .catch(() => {});
    }
  }
}

/** Resolves when either signal aborts. */
function untilEither(a: AbortSignal, b: AbortSignal): Promise<void> {
  if (a.aborted || b.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      a.removeEventListener('abort', done);
      b.removeEventListener('abort', done);
      resolve();
    };
    a.addEventListener('abort', done, { once: true });
    b.addEventListener('abort', done, { once: true });
  });
}

/**
 * Claims from the claim functions' rows. Keys picked there whose head op the single statement
 * could not claim go through the transactional path, one key at a time.
 */
async function claimLeftovers(
  store: QueueStore,
  options: ChainOptions,
  rows: ClaimedRow[],
): Promise<Claimed> {
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
    const more = await store.claimTx({ ...options, key, limit: 1 });
    out.claims.push(...more.claims);
    out.poisoned.push(...more.poisoned);
  }
  return out;
}
