// One timed trial of the durable-flow comparison (bench/durable.ts runs it in a fresh process on
// a fresh database): `system` is ours (`rigging`; `rigging-unnamed` on a database opened with
// `preparedStatements: 0`), DBOS Transact (`dbos`), or the floor (bare
// single-row INSERT + COMMIT round trips, one per step). Prints one JSON line.
import { pathToFileURL } from 'node:url';
import { openDatabase, sql } from '@rigging/sql';

// `rigging-before`: the same, from another copy of the package's src/ (BENCH_BEFORE_SRC).
const src =
  process.argv[2] === 'rigging-before'
    ? pathToFileURL(`${process.env.BENCH_BEFORE_SRC!}/`).href
    : new URL('../src/', import.meta.url).href;
const { Engine, linearFlow, task } = (await import(
  `${src}index.ts`
)) as typeof import('../src/index.js');
const { sqlLog } = (await import(`${src}sql.ts`)) as typeof import('../src/sql.js');

const [system, url, stepsArg, flowsArg, inFlightArg] = process.argv.slice(2);
const steps = Number(stepsArg);
const flows = Number(flowsArg);
const inFlight = Number(inFlightArg);

/** Runs `one(i)` for i < count, `inFlight` at a time; resolves with the elapsed ms. */
async function timed(count: number, one: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) await one(next++);
    }),
  );
  return performance.now() - t0;
}

let ms: number;
let tasks: number;
if (system === 'rigging' || system === 'rigging-unnamed' || system === 'rigging-before') {
  const database = await openDatabase(
    url!,
    system === 'rigging-unnamed' ? { preparedStatements: 0 } : {},
  );
  const engine = new Engine({ log: await sqlLog(database) });
  const flow = linearFlow(
    'bench',
    ...Array.from({ length: steps }, (_, i) => task({ name: `s${i}`, execute: () => null })),
  );
  await engine.run(flow, { inputs: {} }); // warm-up (counted in tasks, not timed)
  ms = await timed(flows, () => engine.run(flow, { inputs: {} }));
  tasks = (flows + 1) * steps;
  await database.close();
} else if (system === 'dbos') {
  const { DBOS } = await import('@dbos-inc/dbos-sdk');
  DBOS.setConfig({ name: 'rigging-bench', systemDatabaseUrl: url!, logLevel: 'error' });
  const step = () => Promise.resolve(null);
  const workflow = DBOS.registerWorkflow(
    async () => {
      for (let i = 0; i < steps; i++) await DBOS.runStep(step, { name: `s${i}` });
      return null;
    },
    { name: `bench${steps}` },
  );
  await DBOS.launch();
  await workflow(); // warm-up
  ms = await timed(flows, () => workflow());
  tasks = (flows + 1) * steps;
  await DBOS.shutdown();
} else {
  // The floor: one bare single-row INSERT + COMMIT round trip per step, `inFlight` clients.
  const database = await openDatabase(url!, { poolSize: inFlight });
  await sql`create table if not exists floor_rows (k bigserial primary key, v integer)`.execute(
    database.db,
  );
  ms = await timed(flows, async () => {
    for (let i = 0; i < steps; i++)
      await sql`insert into floor_rows (v) values (${i})`.execute(database.db);
  });
  tasks = flows * steps;
  await database.close();
}
console.log(JSON.stringify({ system, steps, flows, inFlight, ms, tasks }));
