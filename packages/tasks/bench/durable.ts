// Durable flows on PostgreSQL, side by side: @rigging/tasks (sqlLog) and DBOS Transact
// (@dbos-inc/dbos-sdk), with the floor (one bare INSERT + COMMIT per step) in the same run.
// Each trial is a fresh process on a fresh database; systems alternate within each round.
// Counted per task: commits (pg_stat_database.xact_commit of the trial's own database, exact)
// and WAL flushes (pg_stat_wal.wal_sync, cluster-wide: other sessions on the server count too;
// the rate of the same interval just before the trial, idle on our side, is subtracted).
// Run: pnpm bench (or tsx bench/durable.ts). Needs PostgreSQL at RIGGING_PG_URL.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openDatabase, sql } from '@rigging/sql';
import { PG_URL, service } from '@rigging/testkit';

const child = fileURLToPath(new URL('./durable-child.ts', import.meta.url));
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
/** BENCH_SCALE scales the number of flows per trial (e.g. 0.5 on a slow machine). */
const scale = Number(process.env.BENCH_SCALE ?? 1);
const cases = [
  { name: '10 steps, one at a time', steps: 10, flows: 100, inFlight: 1 },
  { name: '10 steps, 8 in flight', steps: 10, flows: 200, inFlight: 8 },
  { name: '100 steps, one at a time', steps: 100, flows: 10, inFlight: 1 },
].map((c) => ({ ...c, flows: Math.max(2, Math.round(c.flows * scale)) }));
type System = 'rigging' | 'rigging-unnamed' | 'rigging-before' | 'dbos' | 'floor';

if (!(await service('postgres')).available) {
  console.log('\nDurable flows vs DBOS: PostgreSQL is not reachable; skipped.');
  process.exit(0);
}
const hasDbos = await import('@dbos-inc/dbos-sdk').then(
  () => true,
  () => false,
);
// `rigging`: ours with @rigging/sql's defaults (named statements); `rigging-unnamed`: ours on a
// database opened with `preparedStatements: 0` (as behind a transaction-mode pooler).
const systems: System[] = hasDbos
  ? ['rigging', 'rigging-unnamed', 'dbos', 'floor']
  : ['rigging', 'rigging-unnamed', 'floor'];
// BENCH_BEFORE_SRC=<a copy of an older src/>: that version too, in the same rounds.
if (process.env.BENCH_BEFORE_SRC) systems.splice(1, 0, 'rigging-before');
if (!hasDbos) console.log('@dbos-inc/dbos-sdk is not installed: ours and the floor only.');

const admin = await openDatabase(PG_URL, { poolSize: 1 });
const query = async (text: string, ...values: unknown[]) => {
  const parts = text.split('?');
  const statement = sql.join(
    parts.flatMap((part, k) =>
      k < values.length ? [sql.raw(part), sql`${values[k]}`] : [sql.raw(part)],
    ),
    sql``,
  );
  return (await sql<Record<string, unknown>>`${statement}`.execute(admin.db)).rows;
};
const urlOf = (db: string) => {
  const u = new URL(PG_URL);
  u.pathname = `/${db}`;
  return u.toString();
};
const walSync = async () => Number((await query('select wal_sync from pg_stat_wal'))[0]!.wal_sync);
const commitsOf = async (db: string) => {
  await query('select pg_stat_clear_snapshot()');
  const rows = await query('select xact_commit from pg_stat_database where datname = ?', db);
  return Number(rows[0]?.xact_commit ?? 0);
};
const settle = () => new Promise((resolve) => setTimeout(resolve, 600));

interface Trial {
  tasksPerS: number;
  commitsPerTask: number;
  flushesPerTask: number;
}
const results = new Map<string, Trial[]>();
let seq = 0;

async function trial(system: System, c: (typeof cases)[number]): Promise<Trial> {
  const db = `rigging_bench_${process.pid}_${seq++}`;
  await query(`create database ${db}`);
  try {
    await settle();
    const c0 = await commitsOf(db);
    const w0 = await walSync();
    const t0 = performance.now();
    const out = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        child,
        system,
        urlOf(db),
        String(c.steps),
        String(c.flows),
        String(c.inFlight),
      ],
      { encoding: 'utf8', maxBuffer: 1 << 24 },
    );
    const wall = performance.now() - t0;
    if (out.status !== 0) throw new Error(`${system} trial failed: ${out.stderr}`);
    const r = JSON.parse(out.stdout.trim().split('\n').pop()!) as { ms: number; tasks: number };
    await settle();
    const c1 = await commitsOf(db);
    const w1 = await walSync();
    // Background: the same interval with nothing of ours running.
    const b0 = await walSync();
    await new Promise((resolve) => setTimeout(resolve, Math.min(wall, 5000)));
    const b1 = await walSync();
    const background = ((b1 - b0) * wall) / Math.min(wall, 5000);
    return {
      tasksPerS: ((r.tasks - (system === 'floor' ? 0 : c.steps)) / r.ms) * 1000,
      commitsPerTask: (c1 - c0) / r.tasks,
      flushesPerTask: Math.max(0, w1 - w0 - background) / r.tasks,
    };
  } finally {
    await query(`drop database if exists ${db} with (force)`);
  }
}

const load = () =>
  (spawnSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).stdout ?? '').split(' ')[0];
console.log(
  `\nDurable flows on PostgreSQL (${rounds} rounds, fresh process and database per trial, alternating; load average ${load()})`,
);
for (let round = 0; round < rounds; round++) {
  for (const c of cases) {
    const order = round % 2 === 0 ? systems : [...systems].reverse();
    for (const system of order) {
      const t = await trial(system, c);
      console.log(
        `    round ${round + 1}, ${c.name}, ${system}: ${Math.round(t.tasksPerS)} steps/s, ${t.commitsPerTask.toFixed(2)} commits/step, ${t.flushesPerTask.toFixed(2)} WAL flushes/step`,
      );
      const key = `${c.name}|${system}`;
      results.set(key, [...(results.get(key) ?? []), t]);
    }
  }
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
for (const c of cases) {
  console.log(`  ${c.name} (${c.flows} flows per trial)`);
  const m = new Map<System, Trial>();
  for (const system of systems) {
    const ts = results.get(`${c.name}|${system}`)!;
    const t = {
      tasksPerS: median(ts.map((x) => x.tasksPerS)),
      commitsPerTask: median(ts.map((x) => x.commitsPerTask)),
      flushesPerTask: median(ts.map((x) => x.flushesPerTask)),
    };
    m.set(system, t);
    console.log(
      `    ${system.padEnd(14)} ${Math.round(t.tasksPerS).toLocaleString('en').padStart(7)} steps/s  ${t.commitsPerTask.toFixed(2)} commits/step  ${t.flushesPerTask.toFixed(2)} WAL flushes/step  (runs: ${ts.map((x) => Math.round(x.tasksPerS)).join(', ')})`,
    );
  }
  const ours = m.get('rigging')!.tasksPerS;
  const dbos = m.get('dbos');
  const before = m.get('rigging-before');
  if (before) console.log(`    ours now / before: ${(ours / before.tasksPerS).toFixed(2)}x`);
  const floor = m.get('floor')!.tasksPerS;
  for (const [label, rate] of [
    ['ratio', ours],
    ['unnamed', m.get('rigging-unnamed')!.tasksPerS],
  ] as const) {
    console.log(
      `    ${label}: ${dbos ? `${(rate / dbos.tasksPerS).toFixed(2)}x DBOS, ` : ''}${(rate / floor).toFixed(2)}x the floor`,
    );
  }
}
await admin.close();
