// What PostgreSQL itself allows a drain, measured in the same run as the backend: the backend's
// own claim and success statements run bare (no queue around them), and the least work of any
// durable PostgreSQL queue (no per-key order, no fencing). Both run the shape the backend takes
// at concurrency 16: two connections, each recording batches of 8 successes and claiming the
// next 8 ops in the statement that records them.
import { performance } from 'node:perf_hooks';
import { sql, type Database } from '@rigging/sql';
import type { Claim } from '../src/backend.js';
import { claimOfRow } from '../src/sql/claims.js';
import { postgresDialect } from '../src/sql/dialects/postgres.js';
import { OPS } from '../src/sql/names.js';
import type { ClaimedRow, SucceedItem } from '../src/sql/types.js';

/** Connections the floors run on, and ops per statement on each. */
const CONNECTIONS = 2;
const BATCH = 8;

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
  const ms = performance.now() - t0;
  const wal = (await walPosition(database)) - wal0;
  const { rows } = await sql<{ n: string }>`
    select count(*) as n from aq_bench_minimal where status = 'succeeded'`.execute(db);
  if (done !== n || Number(rows[0]!.n) !== n) {
    throw new Error(`minimal floor: ran ${done} jobs, ${rows[0]!.n} succeeded, of ${n}`);
  }
  return { rate: (done / ms) * 1000, walPerJob: wal / n };
}
