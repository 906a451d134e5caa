import { writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runCluster, SABOTAGE, type RunResult, type Sabotage } from './cluster.js';
import type { FaultKind } from './faults.js';
import type { Workload } from './load.js';
import { namespacesUnavailable } from './netns.js';
import type { Verdict } from './verdict.js';
import { verdictHolds } from './verdict.js';

const USAGE = `Usage: minicloud-cluster [options]

Starts simulated hosts (Linux network namespaces, root only) running minicloud serve and
minicloud worker against this machine's PostgreSQL, drives the public API with a bounded
workload while injecting faults, and prints a verdict. Removes everything it made.

  --api-hosts <n>        hosts running minicloud serve (default 1)
  --worker-hosts <n>     hosts running minicloud worker (default 2)
  --faults <list>        comma-separated: partition, kill, stop; or none (default partition,kill,stop)
  --scaling <list>       instead of one run: one run per api:workers pair without faults,
                         e.g. 1:1,1:2,1:4,2:4, and a table of throughput and latency
  --keys <n>             container keys (default 16)
  --ops-per-key <n>      ops per key (default 12)
  --op-ms <ms>           simulated duration of a container op (default 150; 1500 with faults,
                         so that the ops a fault meets are still running when it bites)
  --consumers <n>        Placement consumers allocated (default 150)
  --deploys <n>          environments deployed and deleted (default 4)
  --reshapes <n>         reshapes through POST /reshaper (default 6)
  --lease-ms <ms>        workers' lease: how soon others take over (default 3000)
  --concurrency <n>      container ops per worker at once (default 4)
  --max-seconds <s>      the load stops submitting after this long (default 180)
  --database <url>       PostgreSQL (default $MINICLOUD_CLUSTER_DATABASE_URL or
                         postgres://postgres@127.0.0.1:5432/postgres); a fresh database is made
  --drain-seconds <s>    how long the verdict waits for submitted ops to end (default 60)
  --json <file>          also write the results as JSON
  --cli <file>           the minicloud CLI the hosts run (default: this build's dist/cli.js);
                         another build's, to compare two builds under one load and verdict
  --cpu-prof             write a CPU profile of every serve and worker process (Node's
                         --cpu-prof, one .cpuprofile per process as it exits) to the run's
                         directory, .minicloud/cluster/<run>/profiles/<host>-<role>/

Self-test: MINICLOUD_CLUSTER_SABOTAGE=<fault> injects one fault the verdict must catch
(${SABOTAGE.join(', ')}); such a run must end with VERDICT FAILS.
Exit codes: 0 verdict holds, 1 it does not, 2 usage, 3 namespaces cannot be made here.`;

function int(values: Record<string, unknown>, name: string, fallback: number, min = 0): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > 100_000) {
    throw new RangeError(`--${name} must be an integer from ${min} to 100000, got ${String(raw)}`);
  }
  return n;
}

function faultList(raw: unknown): FaultKind[] {
  if (raw === undefined) return ['partition', 'kill', 'stop'];
  if (raw === 'none') return [];
  const kinds = String(raw).split(',');
  for (const k of kinds) {
    if (k !== 'partition' && k !== 'kill' && k !== 'stop') {
      throw new RangeError(`--faults: unknown fault ${JSON.stringify(k)} (partition, kill, stop)`);
    }
  }
  return kinds as FaultKind[];
}

/** A rate per container op: the database's rate over the op rate (Placement and deploys too). */
function perOp(perSecond: number, opsPerSecond: number): string {
  return opsPerSecond > 0 ? (perSecond / opsPerSecond).toFixed(1) : '-';
}

function scalingList(raw: unknown): [number, number][] | undefined {
  if (raw === undefined) return undefined;
  return String(raw)
    .split(',')
    .map((pair) => {
      const m = /^(\d+):(\d+)$/.exec(pair);
      if (!m || Number(m[1]) < 1 || Number(m[2]) < 1 || Number(m[1]) + Number(m[2]) > 16) {
        throw new RangeError(`--scaling: expected api:workers pairs such as 1:2, got ${pair}`);
      }
      return [Number(m[1]), Number(m[2])] as [number, number];
    });
}

function sabotage(raw: string | undefined): Sabotage | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!(SABOTAGE as readonly string[]).includes(raw)) {
    throw new RangeError(
      `MINICLOUD_CLUSTER_SABOTAGE: unknown fault ${JSON.stringify(raw)} (${SABOTAGE.join(', ')})`,
    );
  }
  return raw as Sabotage;
}

/** The verdict as the lines printed at the end of a run. */
export function formatVerdict(v: Verdict, result: RunResult): string[] {
  const mark = (n: number) => (n === 0 ? `${n}` : `${n}  <-- must be 0`);
  return [
    'verdict',
    `  container ops  submitted ${v.submitted}, succeeded ${v.succeeded}, failed by design ${v.failedByDesign}`,
    `  lost           ${mark(v.lost)}`,
    `  failed unexpectedly ${mark(v.failedUnexpectedly)}`,
    `  double-applied ${mark(v.doubleApplied)}  (ops with two accepted effects, from the runtime's witness)`,
    `  order violations ${mark(v.orderViolations)}  (per-key effect sequence, from the witness)`,
    `  stale effects refused ${v.staleEffectsRefused}  (lower fencing token than the key had seen)`,
    `  over capacity  ${mark(v.overCapacity)}  (${v.capacitySamples} direct samples + Placement API; ${v.placementWrites} Placement writes, ${v.placementRefusedByCapacity} refused for capacity by design)`,
    `  half-done flows ${mark(v.halfDoneFlows)}  (flows: ${JSON.stringify(v.flowStates)})`,
    `  tasks run twice ${mark(v.tasksRunTwice)}  (task log)`,
    `  failed reads   ${mark(v.readFailures)}; submissions refused ${mark(v.submissionsRefused)}; load errors ${mark(v.loadErrors)}`,
    `  vacuous        ${v.vacuous.length === 0 ? 'no' : `${v.vacuous.join('; ')}  <-- must be no`}`,
    `  takeovers      ${v.takeoverMs.count}, p50 ${v.takeoverMs.p50} ms, max ${v.takeoverMs.max} ms`,
    `  stale writes refused (victims' logs) ${v.staleWritesRefused}; ops re-reported after a takeover ${v.rerunAfterTakeover}`,
    `  throughput     ${v.opsPerSecond.toFixed(1)} container ops/s; op latency p50 ${v.opLatencyMs.p50} ms, p99 ${v.opLatencyMs.p99} ms`,
    `  Placement      write latency p50 ${v.placementLatencyMs.p50.toFixed(1)} ms, p99 ${v.placementLatencyMs.p99.toFixed(1)} ms`,
    `  machine        ${(result.usage.machineBusy * 100).toFixed(0)}% of ${result.usage.cores} cores busy; CPU (cores) ${Object.entries(
      result.usage.cpuByRole,
    )
      .map(([role, cores]) => `${role} ${cores.toFixed(2)}`)
      .join(
        ', ',
      )}, postgres ${result.usage.postgresCpu.toFixed(2)}; ${result.usage.commitsPerSecond.toFixed(0)} commits/s (${perOp(result.usage.commitsPerSecond, result.verdict.opsPerSecond)} per container op), ${perOp(result.usage.writesPerSecond, result.verdict.opsPerSecond)} that wrote`,
    ...v.problems.slice(0, 20).map((p) => `  problem: ${p}`),
    ...(result.sabotage
      ? [`  self-test: sabotage ${result.sabotage} (this verdict must fail)`]
      : []),
    `${verdictHolds(v) ? 'VERDICT HOLDS' : 'VERDICT FAILS'} (${(result.durationMs / 1000).toFixed(0)} s)`,
  ];
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      'api-hosts': { type: 'string' },
      'worker-hosts': { type: 'string' },
      faults: { type: 'string' },
      scaling: { type: 'string' },
      keys: { type: 'string' },
      'ops-per-key': { type: 'string' },
      'op-ms': { type: 'string' },
      consumers: { type: 'string' },
      deploys: { type: 'string' },
      reshapes: { type: 'string' },
      'lease-ms': { type: 'string' },
      concurrency: { type: 'string' },
      'max-seconds': { type: 'string' },
      'drain-seconds': { type: 'string' },
      database: { type: 'string' },
      json: { type: 'string' },
      cli: { type: 'string' },
      'cpu-prof': { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const scaling = scalingList(values.scaling);
  const faults = scaling ? [] : faultList(values.faults);
  const workload: Workload = {
    keys: int(values, 'keys', 16, 1),
    opsPerKey: int(values, 'ops-per-key', 12, 2),
    opMs: int(values, 'op-ms', faults.length > 0 ? 1500 : 150),
    failingKeys: 1,
    consumers: int(values, 'consumers', 150),
    deploys: int(values, 'deploys', 4),
    reshapes: int(values, 'reshapes', 6),
    window: 2,
    clients: 8,
    maxMs: int(values, 'max-seconds', 180, 1) * 1000,
  };
  const unavailable = await namespacesUnavailable();
  if (unavailable) {
    console.error(`minicloud-cluster: ${unavailable}`);
    return 3;
  }
  const here = dirname(fileURLToPath(import.meta.url));
  const common = {
    databaseUrl:
      values.database ??
      process.env.MINICLOUD_CLUSTER_DATABASE_URL ??
      'postgres://postgres@127.0.0.1:5432/postgres',
    workload,
    leaseMs: int(values, 'lease-ms', 3000, 500),
    concurrency: int(values, 'concurrency', 4, 1),
    cli: resolve(values.cli ?? resolve(here, 'cli.js')),
    drainMs: int(values, 'drain-seconds', 60, 1) * 1000,
    sabotage: sabotage(process.env.MINICLOUD_CLUSTER_SABOTAGE),
    cpuProfile: values['cpu-prof'] === true,
    say: (line: string) => console.log(line),
  };
  const results: { api: number; workers: number; result: RunResult }[] = [];
  const runs = scaling ?? [[int(values, 'api-hosts', 1, 1), int(values, 'worker-hosts', 2, 1)]];
  let holds = true;
  for (const [api, workers] of runs) {
    console.log(`run: ${api} API host(s), ${workers} worker host(s)`);
    const logDir = join(process.cwd(), '.minicloud', 'cluster', `${Date.now()}-${api}x${workers}`);
    const result = await runCluster({
      ...common,
      apiHosts: api,
      workerHosts: workers,
      faults,
      logDir,
    });
    for (const line of formatVerdict(result.verdict, result)) console.log(line);
    if (common.cpuProfile) console.log(`CPU profiles: ${join(logDir, 'profiles')}`);
    holds &&= verdictHolds(result.verdict);
    results.push({ api, workers, result });
  }
  if (scaling) {
    console.log(
      '\n| API hosts | worker hosts | container ops/s | op p50 ms | op p99 ms | Placement p50 ms | Placement p99 ms | machine busy | PostgreSQL cores | commits/s | commits per op | writes per op |',
    );
    console.log('| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |');
    for (const { api, workers, result } of results) {
      const v = result.verdict;
      console.log(
        `| ${api} | ${workers} | ${v.opsPerSecond.toFixed(1)} | ${v.opLatencyMs.p50} | ${v.opLatencyMs.p99} | ${v.placementLatencyMs.p50.toFixed(1)} | ${v.placementLatencyMs.p99.toFixed(1)} | ${(result.usage.machineBusy * 100).toFixed(0)}% | ${result.usage.postgresCpu.toFixed(2)} | ${result.usage.commitsPerSecond.toFixed(0)} | ${perOp(result.usage.commitsPerSecond, v.opsPerSecond)} | ${perOp(result.usage.writesPerSecond, v.opsPerSecond)} |`,
      );
    }
  }
  if (values.json) await writeFile(values.json, JSON.stringify(results, null, 2));
  return holds ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`minicloud-cluster: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(error instanceof RangeError || error instanceof TypeError ? 2 : 1);
  },
);
