// What PostgreSQL itself allows a drain, measured in the same run as the backend: the backend's
// own claim and success statements run bare (no queue around them), and the least work of any
// durable PostgreSQL queue (no per-key order, no fencing), and of one that keeps per-key order.
// All run the shape the backend takes at concurrency 16: one connection recording a batch of 16
// successes and claiming the next 16 ops in the statement that records them (the shape that
// drains fastest for each of them here: two connections with batches of 8 were slower).
import { performance } from 'node:perf_hooks';
import { sql, type Database } from '@rigging/sql';
import type { Claim } from '../src/backend.js';
import { claimOfRow } from '../src/sql/claims.js';
import { postgresDialect } from '../src/sql/dialects/postgres.js';
import { OPS } from '../src/sql/names.js';
import type { ClaimedRow, SucceedItem } from '../src/sql/types.js';

/** Connections the floors run on, and ops per statement on each. */
const CONNECTIONS = 1;
const BATCH = 16;

/** The server's WAL insert position, in bytes: a drain's WAL is the difference around it. */
export async function walPosition(database: Database): Promise<number> {
  const { rows } = await sql<{ b: string }>`
    select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text as b`.execute(database.db);
  return Number(rows[0]!.b);
}

/** A drain's figures: jobs per second, and WAL bytes written per job (the whole server's). */
export interface Drained {
  rate: number;
  walPerJob: number;
}

/**
 * A floor's figures once its drain of `n` jobs from `table` (started at `t0`, WAL at `wal0`) has
 * ended after running `done`: fails unless every job ran and succeeded once.
 */
async function drained(
  database: Database,
  table: string,
  run: { n: number; done: number; t0: number; wal0: number; name: string },
): Promise<Drained> {
  const { n, done } = run;
  const ms = performance.now() - run.t0;
  const wal = (await walPosition(database)) - run.wal0;
  const { rows } = await sql<{ n: string }>`
    select count(*) as n from ${sql.table(table)} where status = 'succeeded'`.execute(database.db);
  if (done !== n || Number(rows[0]!.n) !== n) {
    throw new Error(`${run.name}: ran ${done} jobs, ${rows[0]!.n} succeeded, of ${n}`);
  }
  return { rate: (done / ms) * 1000, walPerJob: wal / n };
}

/** The claims of a claim function's rows (rows without an op are keys it could not claim). */
const claimsOf = (rows: ClaimedRow[]): Claim[] => rows.filter((r) => r.id != null).map(claimOfRow);

/** A success of `claim` with a null result that claims the next op, as a worker records it. */
const success = (claim: Claim): SucceedItem => ({
  claim,
  result: null,
  text: 'null',
  next: { leaseMs: 0, workerId: 'floor', maxLeaseExpiries: 0, stopOnPoison: false },
  resolve: () => {},
  reject: () => {},
});

/**
 * The backend's hot statements (the PostgreSQL dialect's own `claim` and `succeedMany`) run bare
 * on queue `queue` of `database`, whose `n` ops are already enqueued: each connection claims
 * {@link BATCH} ops, then records their successes and claims the next ones in one statement,
 * until nothing is left. Fails unless every op succeeded once.
 */
export async function statementsFloor(
  database: Database,
  queue: string,
  n: number,
): Promise<Drained> {
  const hot = postgresDialect(false).hot!;
  const lease = 1e13;
  let done = 0;
  const wal0 = await walPosition(database);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      let claims = claimsOf((await hot.claim(database.db, queue, BATCH, 1, lease, 'floor')).rows);
      while (claims.length > 0) {
        done += claims.length;
        const { rows } = await hot.succeedMany(
          database.db,
          queue,
          claims.map(success),
          2,
          lease,
          'floor',
        );
        claims = claimsOf(rows);
      }
    }),
  );
  const ms = performance.now() - t0;
  const wal = (await walPosition(database)) - wal0;
  const { rows } = await sql<{ n: string }>`
    select count(*) as n from ${sql.table(OPS)} where queue = ${queue} and status = 'succeeded'`.execute(
    database.db,
  );
  if (done !== n || Number(rows[0]!.n) !== n) {
    throw new Error(`statements floor: ran ${done} ops, ${rows[0]!.n} succeeded, of ${n}`);
  }
  return { rate: (done / ms) * 1000, walPerJob: wal / n };
}

/**
 * The least work of any durable PostgreSQL queue: `n` jobs in one table with an index of those
 * queued; each connection claims {@link BATCH} of them (`for update skip locked`), then marks
 * them done and claims the next ones in one statement. No per-key order, no fencing token, no
 * lease. Fails unless every job ran once.
 */
export async function minimalQueueFloor(database: Database, n: number): Promise<Drained> {
  const { db } = database;
  await sql`create table aq_bench_minimal (id bigserial primary key, status text not null,
    payload text not null, result text, worker text, started_at bigint, finished_at bigint)`.execute(
    db,
  );
  await sql`create index aq_bench_minimal_queued on aq_bench_minimal (id) where status = 'queued'`.execute(
    db,
  );
  await sql`insert into aq_bench_minimal (status, payload)
    select 'queued', '{"k":' || g || '}' from generate_series(1, ${n}) g`.execute(db);
  const claimNext = (limit: number) => sql`
    update aq_bench_minimal set status = 'running', worker = 'floor', started_at = 1
    where id in (
      select id from aq_bench_minimal where status = 'queued'
      order by id limit ${limit} for update skip locked
    )
    returning id, payload`;
  let done = 0;
  const wal0 = await walPosition(database);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      let jobs = (await claimNext(BATCH).execute(db)).rows as { id: string; payload: string }[];
      while (jobs.length > 0) {
        for (const job of jobs) JSON.parse(job.payload);
        done += jobs.length;
        const ids = jobs.map((j) => j.id);
        jobs = (
          await sql<{ id: string; payload: string }>`
            with d as (
              update aq_bench_minimal set status = 'succeeded', result = 'null', finished_at = 2
              where id = any(${ids}::bigint[])
            ) ${claimNext(BATCH)}
          `.execute(db)
        ).rows;
      }
    }),
  );
  return drained(database, 'aq_bench_minimal', { n, done, t0, wal0, name: 'minimal floor' });
}

/**
 * The least work of a durable PostgreSQL queue that keeps per-key order, with a fencing token
 * and a lease per claim: `n` jobs of `keys` keys in one table, enqueued key by key in turn. A
 * job is claimable when it is queued and no earlier job of its key is queued or running (one
 * index probe); each connection claims {@link BATCH} of them (`for update skip locked`), then
 * marks them done under their tokens and claims the next ones in one statement, the jobs it
 * just finished no longer counting as running. Writes per job: the claim and the success, on
 * the job's row only. Fails unless every job ran once, in its key's order.
 */
export async function orderedQueueFloor(
  database: Database,
  n: number,
  keys: number,
): Promise<Drained> {
  const { db } = database;
  await sql`create table aq_bench_ordered (id bigserial primary key, key text not null,
    status text not null, payload text not null, result text, token bigint not null default 0,
    lease_until bigint, worker text, started_at bigint, finished_at bigint)`.execute(db);
  await sql`create index aq_bench_ordered_queued on aq_bench_ordered (id)
    where status = 'queued'`.execute(db);
  await sql`create index aq_bench_ordered_pending on aq_bench_ordered (key, id)
    where status in ('queued', 'running')`.execute(db);
  await sql`insert into aq_bench_ordered (key, status, payload)
    select 'k' || (g % ${keys}), 'queued', '{"j":' || (g / ${keys}) || '}'
    from generate_series(0, ${n - 1}) g order by g`.execute(db);
  await sql`analyze aq_bench_ordered`.execute(db);
  type Job = { id: string; key: string; payload: string; token: string };
  /** Claims up to `limit` jobs; `done` are ids finished in the same statement. */
  const claimNext = (limit: number, done: string[]) => sql<Job>`
    update aq_bench_ordered set status = 'running', token = token + 1, worker = 'floor',
      started_at = 1, lease_until = 1e13
    where id in (
      select j.id from aq_bench_ordered j
      where j.status = 'queued' and not exists (
        select 1 from aq_bench_ordered p
        where p.key = j.key and p.id < j.id and p.status in ('queued', 'running')
          and p.id <> all(${done}::bigint[]))
      order by j.id limit ${limit} for update of j skip locked
    )
    returning id, key, payload, token`;
  const last = new Map<string, number>();
  let violations = 0;
  let done = 0;
  const wal0 = await walPosition(database);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      let jobs = (await claimNext(BATCH, []).execute(db)).rows;
      while (jobs.length > 0) {
        for (const job of jobs) {
          const { j } = JSON.parse(job.payload) as { j: number };
          if (j !== (last.get(job.key) ?? -1) + 1) violations++;
          last.set(job.key, j);
        }
        done += jobs.length;
        const ids = jobs.map((x) => x.id);
        jobs = (
          await sql<Job>`
            with d as (
              update aq_bench_ordered t set status = 'succeeded', result = 'null', finished_at = 2
              from unnest(${ids}::bigint[], ${jobs.map((x) => x.token)}::bigint[]) as u(id, token)
              where t.id = u.id and t.token = u.token and t.status = 'running'
            ) ${claimNext(BATCH, ids)}
          `.execute(db)
        ).rows;
      }
    }),
  );
  if (violations > 0) throw new Error(`ordered floor: ${violations} jobs out of their key's order`);
  return drained(database, 'aq_bench_ordered', { n, done, t0, wal0, name: 'ordered floor' });
}
