import { prepareQuery, sql } from '../../sql-peer.js';
import {
  CHANNEL,
  CLAIMED_TYPE,
  CLAIM_SET_FN,
  ENDS_CHANNEL,
  ENQUEUE_FN,
  KEYS,
  SUCCEED_MANY_SET_FN,
} from '../names.js';
import type { Db } from '../rows.js';
import type { ClaimedRow, HeldRow } from '../types.js';
import type { HotPaths, QueueDialect } from './dialect.js';
import { listen } from './pg-listen.js';
import { returningStatements } from './sqlite.js';

/** A `json` column, which drivers return parsed or as text. */
const json = <T>(value: unknown): T => (typeof value === 'string' ? JSON.parse(value) : value) as T;

const enqueueQuery = prepareQuery(
  (
    _db,
    p: {
      queue: string;
      key: string;
      id: string;
      type: string;
      payload: string;
      idem: string | null;
      waited: number;
      at: number;
    },
  ) => sql<{ j: unknown }>`
    select ${sql.raw(ENQUEUE_FN)}(${p.queue}, ${p.key}, ${p.id}, ${p.type}, ${p.payload},
      ${p.idem}::text, ${p.waited}, ${p.at}) as j`,
);

/**
 * A row of the claim functions: a claimed op, a key picked alone, or `ok` (see
 * `pg-claimed-rows.ts`).
 */
type ClaimedTypeRow = ClaimedRow & { ok: number[] | null };

// A claim that picked fewer keys than asked also reads the next due time (a worker that is about
// to wait would ask for it next): one round trip for both, the due time in a last row of its own,
// the only one without `picked`. The subquery is `QueueReads.nextDueAt`'s, at the claim's time.
const claimQuery = prepareQuery(
  (
    _db,
    p: { queue: string; limit: number; at: number; leaseUntil: number; workerId: string },
  ) => sql<ClaimedTypeRow & { due: number | string | null }>`
    with c as (
      select * from ${sql.raw(CLAIM_SET_FN)}(${p.queue}, ${p.limit}, ${p.at}, ${p.leaseUntil},
        ${p.workerId})
    )
    select c.*, null::bigint as due from c
    union all
    select n.*, (
      select min(avail_at) from ${sql.table(KEYS)}
      where queue = ${p.queue} and state = 'ready' and avail_at > ${p.at}
    )
    from (select (null::${sql.raw(CLAIMED_TYPE)}).*) as n
    where (select count(*) from c) < ${p.limit}`,
);

const succeedManyQuery = prepareQuery(
  (
    _db,
    p: {
      queue: string;
      keys: string[];
      ids: string[];
      tokens: number[];
      results: string[];
      announce: (string | null)[];
      next: boolean[];
      at: number;
      leaseUntil: number;
      workerId: string;
    },
  ) => sql<ClaimedTypeRow>`
    select * from ${sql.raw(SUCCEED_MANY_SET_FN)}(${p.queue}, ${p.keys}::text[], ${p.ids}::text[],
      ${p.tokens}::integer[], ${p.results}::text[], ${p.announce}::text[], ${p.next}::boolean[],
      ${p.at}, ${p.leaseUntil}, ${p.workerId})`,
);

/**
 * The hot operations (enqueue, claim, a batch of successes) as single statements in autocommit
 * calling the functions of `pg-functions.ts` (the enqueue) and `pg-set-functions.ts`: one round
 * trip instead of five to seven (BEGIN, statements, COMMIT), each prepared once (`prepareQuery`).
 * Locks are taken in the same order as the transactional paths (key row, then op rows).
 */
const hot: HotPaths = {
  async enqueue(db, queue, id, input, payload, at) {
    const { rows } = await enqueueQuery.execute(db, {
      queue,
      key: input.key,
      id,
      type: input.type,
      payload,
      idem: input.idempotencyKey ?? null,
      waited: input.waited ? 1 : 0,
      at,
    });
    return json<{ state: string; next_seq: number | string }>(rows[0]!.j);
  },
  async claim(db, queue, limit, at, leaseUntil, workerId) {
    const { rows } = await claimQuery.execute(db, { queue, limit, at, leaseUntil, workerId });
    const out: ClaimedRow[] = [];
    let due: number | null | undefined;
    for (const row of rows) {
      if (row.picked === null) due = row.due === null ? null : Number(row.due);
      else out.push(row);
    }
    return { rows: out, due };
  },
  async succeedMany(db, queue, items, at, leaseUntil, workerId) {
    const { rows } = await succeedManyQuery.execute(db, {
      queue,
      keys: items.map((it) => it.claim.op.key),
      ids: items.map((it) => it.claim.op.id),
      tokens: items.map((it) => it.claim.token),
      results: items.map((it) => it.text),
      announce: items.map((it) => (it.claim.announce ? `d:${queue}:${it.claim.op.id}` : null)),
      next: items.map((it) => it.next !== undefined),
      at,
      leaseUntil,
      workerId,
    });
    const [head, ...claimed] = rows;
    return { ok: (head?.ok ?? []).map(Number), rows: claimed };
  },
};

/**
 * Owners by database session: this process holds a session open and a claim records its server
 * pid and start time; a claim whose session is no longer in `pg_stat_activity` (the process died,
 * the connection broke) is taken over at once. A pid reused by a new session has another start
 * time. (If a live process loses that session, its claims are taken over too; its heartbeat then
 * finds them lost and aborts their handlers with `async-queue.lease_lost`.)
 */
const sessionOwners = {
  async presence(database: Parameters<NonNullable<QueueDialect['listen']>>[0]) {
    const session = await database.session();
    try {
      const { rows } = await session.query<{ pid: number; t: string }>(
        `select pid, (extract(epoch from backend_start) * 1000000)::bigint::text as t
         from pg_stat_activity where pid = pg_backend_pid()`,
      );
      const row = rows[0]!;
      return { tag: `pg:${row.pid}:${row.t}`, lost: session.lost, close: () => session.close() };
    } catch (err) {
      await session.close().catch(() => {});
      throw err;
    }
  },
  async gone(db: Db, tags: readonly string[]) {
    const wanted = new Map<string, string>();
    for (const tag of tags) {
      const m = /^pg:(\d+):(\d+)$/.exec(tag);
      if (m) wanted.set(tag, m[1]!);
    }
    if (wanted.size === 0) return new Set<string>();
    const pids = [...new Set(wanted.values())].map(Number);
    const { rows } = await sql<{ pid: number; t: string | null }>`
      select pid, (extract(epoch from backend_start) * 1000000)::bigint::text as t
      from pg_stat_activity where pid = any(${pids}::integer[])
    `.execute(db);
    const alive = new Set<string>();
    for (const r of rows) {
      alive.add(`pg:${r.pid}:${r.t}`);
      // Another role's session may hide its start time: its pid alone then counts as alive.
      if (r.t === null) alive.add(`pid-only:${r.pid}`);
    }
    const gone = new Set<string>();
    for (const [tag, pid] of wanted) {
      if (!alive.has(tag) && !alive.has(`pid-only:${pid}`)) gone.add(tag);
    }
    return gone;
  },
};

/**
 * PostgreSQL: row locks with `FOR UPDATE SKIP LOCKED`, wake-ups by `LISTEN/NOTIFY` (unless
 * `pushes` is false), and the single-statement hot paths. Under READ COMMITTED one statement sees
 * one snapshot, so the claim takes a key's head op only when the key row it locked is the version
 * that snapshot sees, and leaves anything unusual to the store's transactional path.
 * @internal
 */
export function postgresDialect(pushes: boolean): QueueDialect {
  return {
    name: 'postgres',
    defaultPollMs: 2000,
    splitBatches: false,
    forUpdate: (query, skipLocked) =>
      skipLocked ? query.forUpdate().skipLocked() : query.forUpdate(),
    async notify(trx, payload, channel) {
      await sql`select pg_notify(${channel === 'work' ? CHANNEL : ENDS_CHANNEL}, ${payload})`.execute(
        trx,
      );
    },
    ...returningStatements(),
    /**
     * The key rows are locked in key order first, as every other statement that locks several
     * keys does (a batch of successes), so the two cannot deadlock.
     */
    async extendLeases(db, queue, claims, until, held) {
      return (await db
        .with('l', (qb) =>
          qb.selectFrom(KEYS).select('op_key').where(held(claims)).orderBy('op_key').forUpdate(),
        )
        .updateTable(KEYS)
        .set({ lease_until: until })
        .from('l')
        .whereRef(`${KEYS}.op_key`, '=', 'l.op_key')
        .where(`${KEYS}.queue`, '=', queue)
        .returning([`${KEYS}.running_op`, `${KEYS}.token`])
        .execute()) as HeldRow[];
    },
    hot,
    listen: pushes ? listen : undefined,
    owners: sessionOwners,
  };
}
