// Side-by-side figures for @rigging/async-queue. Run: pnpm bench (about a minute or two).
// BENCH_KEYS / BENCH_JOBS scale the per-key workloads (default 100 keys x 100 jobs, the issue's);
// BENCH_PEERS=0 skips pg-boss and BullMQ (for repeated before/after runs); BENCH_ONLY=takeover
// runs only the SIGKILL -> takeover figures; BENCH_ONLY=drain runs only the PostgreSQL drain,
// its floors (floors.ts) and BullMQ, alternately, BENCH_ROUNDS times (default 5), and prints
// medians.
import { performance } from 'node:perf_hooks';
import { deferred, sleep } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { freshDatabase, service, spawnNode, REDIS_URL, PG_URL } from '@rigging/testkit';
import { fileURLToPath } from 'node:url';
import PQueue from 'p-queue';
import { createQueue, memoryBackend, type QueueBackend } from '../src/index.js';
import { Notifier, sqlBackend } from '../src/sql.js';
import {
  minimalQueueFloor,
  orderedQueueFloor,
  statementsFloor,
  walPosition,
  type Drained,
} from './floors.js';
import { startDurableRedis } from './durable-redis.js';

const KEYS = Number(process.env.BENCH_KEYS ?? 100);
const PEERS = process.env.BENCH_PEERS !== '0';
const JOBS = Number(process.env.BENCH_JOBS ?? 100);
const CONCURRENCY = 16;
const rows: { name: string; value: string }[] = [];
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

// ------------------------------------------------ memory vs p-queue, no-op ops
async function memoryVsPQueue(n: number): Promise<[number, number]> {
  const keys = 1000;
  const ours = async () => {
    const q = createQueue({
      backend: memoryBackend(),
      concurrency: CONCURRENCY,
      handlers: { noop: async (_p: null) => null },
    });
    const t0 = performance.now();
    for (let i = 0; i < n; i++) void q.cast(`k${i % keys}`, { type: 'noop', payload: null });
    await new Promise<void>((resolve) => {
      let done = 0;
      q.on('op:succeeded', () => {
        if (++done === n) resolve();
      });
    });
    const ms = performance.now() - t0;
    await q.close();
    return (n / ms) * 1000;
  };
  const theirs = async () => {
    const q = new PQueue({ concurrency: CONCURRENCY });
    const t0 = performance.now();
    for (let i = 0; i < n; i++) void q.add(async () => null);
    await q.onIdle();
    return (n / (performance.now() - t0)) * 1000;
  };
  await ours();
  await theirs();
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < 3; i++) {
    a.push(await ours());
    b.push(await theirs());
  }
  const median = (xs: number[]) => xs.sort((x, y) => x - y)[1]!;
  return [median(a), median(b)];
}

// ------------------------------------------------ durable backends: per-key serial throughput
/** A queue that only enqueues the benchmark's jobs. */
const producerQueue = (backend: QueueBackend) =>
  createQueue({ backend, worker: false, handlers: { job: (_p: { k: number }) => null } });

/** Enqueues KEYS x JOBS jobs: keys filled in parallel, each key's jobs one after the other. */
async function fill(producer: ReturnType<typeof producerQueue>) {
  await Promise.all(
    Array.from({ length: KEYS }, async (_, k) => {
      for (let j = 0; j < JOBS; j++)
        await producer.cast(`k${k}`, { type: 'job', payload: { k: j } });
    }),
  );
}

/**
 * Drains KEYS x JOBS jobs enqueued first, checking each key's order; with `wal` (PostgreSQL),
 * also the WAL the drain wrote per job.
 */
async function perKeyThroughput(
  makeBackend: () => QueueBackend,
  makeProducer: () => QueueBackend,
  wal?: Database,
): Promise<Drained> {
  const producer = producerQueue(makeProducer());
  const n = KEYS * JOBS;
  const order = new Map<string, number>();
  let violations = 0;
  const all = deferred<void>();
  let done = 0;
  await fill(producer);
  const wal0 = wal ? await walPosition(wal) : 0;
  const t0 = performance.now();
  const worker = createQueue({
    backend: makeBackend(),
    concurrency: CONCURRENCY,
    handlers: {
      job: async (p: { k: number }, ctx) => {
        const last = order.get(ctx.key) ?? -1;
        if (p.k !== last + 1) violations++;
        order.set(ctx.key, p.k);
        return null;
      },
    },
  });
  worker.on('op:succeeded', () => {
    if (++done === n) all.resolve();
  });
  await all.promise;
  const rate = (n / (performance.now() - t0)) * 1000;
  const walPerJob = wal ? ((await walPosition(wal)) - wal0) / n : Number.NaN;
  await worker.close();
  await producer.close();
  if (violations) throw new Error(`per-key order violated ${violations} times`);
  return { rate, walPerJob };
}

// ------------------------------------------------ idle enqueue -> start latency (another instance enqueues)
async function idleLatency(
  makeBackend: () => QueueBackend,
  makeProducer: () => QueueBackend,
  samples = 30,
) {
  let started: ReturnType<typeof deferred<number>> = deferred<number>();
  const worker = createQueue({
    backend: makeBackend(),
    concurrency: 4,
    handlers: { ping: async (_p: null) => started.resolve(performance.now()) },
  });
  const producer = createQueue({
    backend: makeProducer(),
    worker: false,
    handlers: { ping: (_p: null) => null },
  });
  const lat: number[] = [];
  for (let i = 0; i < samples; i++) {
    await sleep(20 + Math.random() * 30);
    started = deferred<number>();
    const t0 = performance.now();
    await producer.cast(`l${i}`, { type: 'ping', payload: null });
    lat.push((await started.promise) - t0);
  }
  await worker.close();
  await producer.close();
  lat.sort((a, b) => a - b);
  return { p50: lat[Math.floor(lat.length / 2)]!, p95: lat[Math.floor(lat.length * 0.95)]! };
}

async function withSql(kind: 'sqlite-file' | 'postgres', label: string) {
  const fresh = await freshDatabase(kind, 'aq_bench');
  const a: Database = await openDatabase(fresh.url, { poolSize: CONCURRENCY + 2 });
  // Producer on its own connection (a different handle on SQLite: still one process here).
  const p: Database = kind === 'postgres' ? await openDatabase(fresh.url) : a;
  try {
    // Producer and workers of this process connected directly, as one app would connect them.
    const notifier = new Notifier();
    const drained = await perKeyThroughput(
      () => sqlBackend(a, { name: 'tp', notifier }),
      () => sqlBackend(p, { name: 'tp', notifier }),
      kind === 'postgres' ? a : undefined,
    );
    const { rate } = drained;
    rows.push({
      name: `${label}: ${KEYS} keys x ${JOBS} jobs, concurrency ${CONCURRENCY}`,
      value: `${fmt(rate)} jobs/s`,
    });
    if (kind === 'postgres') {
      // Context for the figures: what one committed write costs on this server right now.
      await sql`create table if not exists aq_bench_probe (x integer)`.execute(a.db);
      const commits: number[] = [];
      for (let i = 0; i < 30; i++) {
        const t = performance.now();
        await sql`insert into aq_bench_probe values (1)`.execute(a.db);
        commits.push(performance.now() - t);
      }
      commits.sort((x, y) => x - y);
      rows.push({
        name: 'PostgreSQL: one autocommit insert (commit cost, same run)',
        value: `p50 ${commits[15]!.toFixed(2)} ms`,
      });
      floorRows({ ours: drained, ...(await pgFloors()) });
    }
    const lat = await idleLatency(
      () => sqlBackend(a, { name: 'lat', pollMs: kind === 'postgres' ? 2000 : 250, notifier }),
      () => sqlBackend(p, { name: 'lat', notifier }),
    );
    rows.push({
      name: `${label}: idle enqueue -> start (same process)`,
      value: `p50 ${lat.p50.toFixed(2)} ms, p95 ${lat.p95.toFixed(2)} ms`,
    });
    return rate;
  } finally {
    if (p !== a) await p.close();
    await a.close();
    await fresh.drop();
  }
}

/** The PostgreSQL drain and its floors (see `floors.ts`). */
interface PgDrains {
  ours: Drained;
  statements: Drained;
  minimal: Drained;
  ordered: Drained;
}

/** The rows of the PostgreSQL drain beside its floors: rates, WAL per job, ratios. */
function floorRows(d: PgDrains, suffix = '') {
  const wal = (x: Drained) => `${fmt(x.walPerJob)} WAL bytes/job`;
  rows.push({ name: `PostgreSQL backend: WAL per job${suffix}`, value: wal(d.ours) });
  rows.push({
    name: `PostgreSQL floor: the backend's claim + success statements bare${suffix}`,
    value: `${fmt(d.statements.rate)} jobs/s, ${wal(d.statements)}`,
  });
  rows.push({
    name: 'ratio PostgreSQL backend / its statements bare',
    value: `${(d.ours.rate / d.statements.rate).toFixed(2)}x`,
  });
  rows.push({
    name: `PostgreSQL: minimal queue, no per-key order or fencing${suffix}`,
    value: `${fmt(d.minimal.rate)} jobs/s, ${wal(d.minimal)}`,
  });
  rows.push({
    name: 'ratio statements bare / minimal queue (cost of order and fencing)',
    value: `${(d.statements.rate / d.minimal.rate).toFixed(2)}x`,
  });
  rows.push({
    name: `PostgreSQL: minimal queue with per-key order, token and lease${suffix}`,
    value: `${fmt(d.ordered.rate)} jobs/s, ${wal(d.ordered)}`,
  });
  rows.push({
    name: 'ratio PostgreSQL backend / minimal queue with per-key order',
    value: `${(d.ours.rate / d.ordered.rate).toFixed(2)}x`,
  });
}

/**
 * The floors of the PostgreSQL drain (see `floors.ts`), on a fresh database: the backend's own
 * statements bare on the same KEYS x JOBS ops, and the least work of any durable queue.
 */
async function pgFloors(): Promise<Omit<PgDrains, 'ours'>> {
  const fresh = await freshDatabase('postgres', 'aq_bench_floor');
  const database = await openDatabase(fresh.url, { poolSize: 4 });
  try {
    const producer = producerQueue(sqlBackend(database, { name: 'floor' }));
    await fill(producer);
    await producer.close();
    const statements = await statementsFloor(database, 'floor', KEYS * JOBS);
    const minimal = await minimalQueueFloor(database, KEYS * JOBS);
    const ordered = await orderedQueueFloor(database, KEYS * JOBS, KEYS);
    return { statements, minimal, ordered };
  } finally {
    await database.close();
    await fresh.drop();
  }
}

// ------------------------------------------------ SIGKILL -> takeover
const TAKEOVER_WORKER = fileURLToPath(
  new URL('../test/fixtures/takeover-worker.ts', import.meta.url),
);
const TAKEOVER_LEASE_MS = 5000;

/**
 * A worker process claims an op and is SIGKILLed; how long until a surviving worker (default
 * `pollMs`) runs the op. With owner evidence (PostgreSQL session, SQLite pid) it takes over at
 * once; MySQL/MariaDB has none and waits the lease (as every backend did before).
 */
async function takeover(kind: 'sqlite-file' | 'postgres' | 'mysql'): Promise<number> {
  const fresh = await freshDatabase(kind, 'aq_bench_takeover');
  const database = await openDatabase(fresh.url);
  const child = spawnNode(TAKEOVER_WORKER, [fresh.url, 'takeover', String(TAKEOVER_LEASE_MS)]);
  try {
    const ran = deferred<number>();
    const make = (worker: boolean) =>
      createQueue({
        backend: sqlBackend(database, { name: 'takeover' }),
        worker,
        leaseMs: TAKEOVER_LEASE_MS,
        handlers: { hold: (_p: null) => void ran.resolve(performance.now()) },
      });
    const producer = make(false);
    const id = await producer.cast('k', { type: 'hold', payload: null });
    await child.waitForLine(`claimed ${id}`, 60_000);
    const survivor = make(true);
    await sleep(500);
    const killed = performance.now();
    child.kill('SIGKILL');
    await child.exited;
    const at = await ran.promise;
    await survivor.close();
    await producer.close();
    return at - killed;
  } finally {
    child.kill('SIGKILL');
    await database.close();
    await fresh.drop();
  }
}

// ------------------------------------------------ peers
async function pgBoss(): Promise<number | undefined> {
  const fresh = await freshDatabase('postgres', 'aq_bench_boss');
  const mod = (await import('pg-boss')) as unknown as { default: new (url: string) => any };
  const PgBoss = mod.default;
  const boss = new PgBoss(fresh.url);
  boss.on('error', () => {});
  await boss.start();
  try {
    const n = KEYS * JOBS;
    await boss.createQueue('bench', { name: 'bench', policy: 'singleton' });
    const jobs = [];
    for (let j = 0; j < JOBS; j++)
      for (let k = 0; k < KEYS; k++)
        jobs.push({ name: 'bench', data: { k, j }, singletonKey: `k${k}` });
    await boss.insert(jobs);
    let done = 0;
    const all = deferred<void>();
    const t0 = performance.now();
    for (let w = 0; w < CONCURRENCY; w++) {
      await boss.work('bench', { batchSize: 1, pollingIntervalSeconds: 0.5 }, async () => {
        if (++done === n) all.resolve();
      });
    }
    await Promise.race([all.promise, sleep(30_000)]);
    return (done / (performance.now() - t0)) * 1000;
  } finally {
    await boss.stop({ graceful: false, wait: true }).catch(() => {});
    await fresh.drop().catch(() => {});
  }
}

/** BullMQ's drain of the same jobs on the Redis at `url` (the machine's own by default). */
async function bullmq(url = REDIS_URL): Promise<number> {
  const { Queue, Worker } = await import('bullmq');
  const { Redis } = await import('ioredis');
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const name = `aq-bench-${process.pid}`;
  const q = new Queue(name, { connection });
  const n = KEYS * JOBS;
  const jobs = [];
  for (let j = 0; j < JOBS; j++)
    for (let k = 0; k < KEYS; k++)
      jobs.push({ name: 'job', data: { k, j }, opts: { removeOnComplete: true } });
  await q.addBulk(jobs);
  let done = 0;
  const all = deferred<void>();
  const t0 = performance.now();
  const workerConnection = connection.duplicate();
  const worker = new Worker(name, async () => null, {
    connection: workerConnection,
    concurrency: CONCURRENCY,
  });
  worker.on('completed', () => {
    if (++done === n) all.resolve();
  });
  await all.promise;
  const rate = (n / (performance.now() - t0)) * 1000;
  await worker.close();
  await q.obliterate({ force: true });
  await q.close();
  workerConnection.disconnect();
  connection.disconnect();
  return rate;
}

// ------------------------------------------------ PostgreSQL drain beside its floors and BullMQ, alternated
async function drainRounds(): Promise<void> {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
  const bull = PEERS && (await service('redis')).available;
  const ours: Drained[] = [];
  const statements: Drained[] = [];
  const minimal: Drained[] = [];
  const ordered: Drained[] = [];
  const bulls: number[] = [];
  const durableBulls: number[] = [];
  const durable = PEERS ? await startDurableRedis() : undefined;
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  /** The median rate, and the median WAL per job. */
  const medianOf = (xs: Drained[]): Drained => ({
    rate: median(xs.map((x) => x.rate)),
    walPerJob: median(xs.map((x) => x.walPerJob)),
  });
  for (let r = 0; r < rounds; r++) {
    const fresh = await freshDatabase('postgres', 'aq_bench');
    const a = await openDatabase(fresh.url, { poolSize: CONCURRENCY + 2 });
    const p = await openDatabase(fresh.url);
    try {
      const notifier = new Notifier();
      ours.push(
        await perKeyThroughput(
          () => sqlBackend(a, { name: 'tp', notifier }),
          () => sqlBackend(p, { name: 'tp', notifier }),
          a,
        ),
      );
    } finally {
      await p.close();
      await a.close();
      await fresh.drop();
    }
    const floors = await pgFloors();
    statements.push(floors.statements);
    minimal.push(floors.minimal);
    ordered.push(floors.ordered);
    if (bull) bulls.push(await bullmq());
    if (durable) durableBulls.push(await bullmq(durable.url));
    console.log(
      `round ${r + 1}: ours ${fmt(ours[r]!.rate)} jobs/s, ` +
        `its statements bare ${fmt(statements[r]!.rate)}, minimal queue ${fmt(minimal[r]!.rate)}, ` +
        `ordered minimal ${fmt(ordered[r]!.rate)}` +
        (bull ? `, BullMQ ${fmt(bulls[r]!)} jobs/s` : '') +
        (durable ? `, BullMQ on a durable Redis ${fmt(durableBulls[r]!)} jobs/s` : ''),
    );
  }
  await durable?.stop();
  const o = medianOf(ours);
  rows.push({ name: `PostgreSQL backend, median of ${rounds}`, value: `${fmt(o.rate)} jobs/s` });
  floorRows(
    {
      ours: o,
      statements: medianOf(statements),
      minimal: medianOf(minimal),
      ordered: medianOf(ordered),
    },
    ', median',
  );
  if (bull) {
    const b = median(bulls);
    rows.push({ name: 'BullMQ (NO per-key order), median', value: `${fmt(b)} jobs/s` });
    rows.push({ name: 'ratio PostgreSQL backend / BullMQ', value: `${(o.rate / b).toFixed(2)}x` });
  }
  if (durable) durableRows(o.rate, median(durableBulls), ', median');
}

/**
 * The rows of BullMQ on a Redis that fsyncs its append-only file before every reply (see
 * `durable-redis.ts`): a job it reports done survives a crash, as one of ours does.
 */
function durableRows(ours: number, bull: number, suffix = '') {
  rows.push({
    name: `BullMQ on a durable Redis (appendfsync always; NO per-key order)${suffix}`,
    value: `${fmt(bull)} jobs/s`,
  });
  rows.push({
    name: 'ratio PostgreSQL backend / BullMQ on a durable Redis',
    value: `${(ours / bull).toFixed(2)}x`,
  });
}

// ------------------------------------------------ run
const N = 20_000;
const ONLY_TAKEOVER = process.env.BENCH_ONLY === 'takeover';
const ONLY_DRAIN = process.env.BENCH_ONLY === 'drain';
if (ONLY_DRAIN) {
  await drainRounds();
  console.table(rows);
  process.exit(0);
}
if (!ONLY_TAKEOVER) await throughputFigures();

async function throughputFigures() {
  const [ours, pq] = await memoryVsPQueue(N);
  rows.push({
    name: `memory backend: ${N} no-op ops, 1000 keys, concurrency ${CONCURRENCY}`,
    value: `${fmt(ours)} ops/s`,
  });
  rows.push({ name: `p-queue (no per-key order), same ops`, value: `${fmt(pq)} ops/s` });
  rows.push({ name: 'ratio memory / p-queue', value: `${(ours / pq).toFixed(2)}x` });

  const sqliteRate = await withSql('sqlite-file', 'SQLite backend');
  let pgRate: number | undefined;
  if ((await service('postgres')).available) {
    pgRate = await withSql('postgres', 'PostgreSQL backend');
    const boss = !PEERS
      ? undefined
      : await pgBoss().catch((e: unknown) => (console.warn('pg-boss failed:', e), undefined));
    if (boss !== undefined) {
      rows.push({
        name: `pg-boss 10 (policy singleton + singletonKey, 16 workers), same jobs`,
        value: `${fmt(boss)} jobs/s`,
      });
      rows.push({
        name: 'ratio PostgreSQL backend / pg-boss',
        value: `${(pgRate / boss).toFixed(2)}x`,
      });
    }
  }
  if (PEERS && (await service('redis')).available) {
    const bull = await bullmq().catch(
      (e: unknown) => (console.warn('BullMQ failed:', e), undefined),
    );
    if (bull !== undefined) {
      rows.push({
        name: `BullMQ (one queue, NO per-key order), same jobs`,
        value: `${fmt(bull)} jobs/s`,
      });
      if (pgRate !== undefined)
        rows.push({
          name: 'ratio PostgreSQL backend / BullMQ',
          value: `${(pgRate / bull).toFixed(2)}x`,
        });
      rows.push({
        name: 'ratio SQLite backend / BullMQ',
        value: `${(sqliteRate / bull).toFixed(2)}x`,
      });
    }
  }
  if (PEERS && pgRate !== undefined) {
    const durable = await startDurableRedis();
    if (durable) {
      try {
        durableRows(pgRate, await bullmq(durable.url));
      } finally {
        await durable.stop();
      }
    }
  }
}

for (const kind of ['sqlite-file', 'postgres', 'mysql'] as const) {
  if (kind !== 'sqlite-file' && !(await service(kind)).available) continue;
  const ms = await takeover(kind).catch(
    (e: unknown) => (console.warn('takeover failed:', e), undefined),
  );
  if (ms === undefined) continue;
  rows.push({
    name: `SIGKILL -> takeover on ${kind} (lease ${TAKEOVER_LEASE_MS} ms, default pollMs)`,
    value: `${fmt(ms)} ms`,
  });
}
void PG_URL;
console.table(rows);
process.exit(0);
