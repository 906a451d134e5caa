import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase, sql } from '@rigging/sql';
import { Api } from './api.js';
import { CapacityWatch } from './capacity.js';
import { injectFaults, type FaultKind, type FaultRecord } from './faults.js';
import { runLoad, type Workload } from './load.js';
import { Network } from './netns.js';
import { startProcess, stopProcess, type HostProcess, type ProcessOptions } from './processes.js';
import { ClusterState } from './state.js';
import { sample, usageBetween, type Usage } from './usage.js';
import { verdict, type Verdict } from './verdict.js';

/** One cluster run: its shape, its workload and its faults. */
export interface ClusterRunOptions {
  /** PostgreSQL of the machine, as reached from here (a fresh database is made beside it). */
  databaseUrl: string;
  apiHosts: number;
  workerHosts: number;
  faults: readonly FaultKind[];
  workload: Workload;
  leaseMs: number;
  /** Container ops of different keys one worker runs at once. */
  concurrency: number;
  /** minicloud's `dist/cli.js`. */
  cli: string;
  /** Where logs go (kept after the run). */
  logDir: string;
  /** Write a CPU profile of every `serve` and `worker` process to `<logDir>/profiles/`. */
  cpuProfile?: boolean;
  /** How long the verdict waits for submitted ops to end. @default 60000 */
  drainMs?: number;
  /**
   * Self-test: one fault the verdict must catch (see {@link SABOTAGE}); the container runtime's
   * are passed to the hosts as `MINICLOUD_SABOTAGE`, the others are injected from here.
   */
  sabotage?: Sabotage | undefined;
  say(line: string): void;
}

/**
 * The self-test's faults, one per run: `lost-op` (an op reported done without its effect),
 * `double-apply` (an op's effect applied a second time past the "already applied" check),
 * `reorder` (an op reported done before its effect, which lands after the next op's),
 * `over-commit` (an allocation over capacity behind Placement's back, released before the end),
 * `verdict-500` (the verdict's Placement read answered with a 500).
 */
export const SABOTAGE = [
  'lost-op',
  'double-apply',
  'reorder',
  'over-commit',
  'verdict-500',
] as const;
export type Sabotage = (typeof SABOTAGE)[number];

/** What a run produced. */
export interface RunResult {
  verdict: Verdict;
  faults: FaultRecord[];
  /** CPU and commits during the load. */
  usage: Usage;
  hosts: { label: string; ns: string; address: string; role: string; pids: number[] }[];
  durationMs: number;
  /** The self-test's fault, when one was injected. */
  sabotage?: Sabotage;
}

/** Server-side keepalives: PostgreSQL ends a cut-off host's sessions (and its locks) in ~4 s. */
const KEEPALIVE =
  '-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2 -c client_connection_check_interval=1000';

function databaseUrlFor(base: URL, database: string, host?: string): string {
  const url = new URL(base.href);
  url.pathname = `/${database}`;
  if (host) {
    url.hostname = host;
    url.searchParams.set('options', KEEPALIVE);
  }
  return url.href;
}

/**
 * Runs one cluster: a fresh database, `apiHosts` hosts running `minicloud serve` and
 * `workerHosts` hosts running `minicloud worker`, each in its own network namespace; drives the
 * workload through the API while the faults are injected; computes the verdict. Everything it
 * made (namespaces, links, nftables rules, processes, the database) is removed before it
 * resolves or rejects.
 */
export async function runCluster(options: ClusterRunOptions): Promise<RunResult> {
  const started = Date.now();
  const base = new URL(options.databaseUrl);
  const dbName = `minicloud_cluster_${randomBytes(4).toString('hex')}`;
  const admin = await openDatabase(options.databaseUrl, { poolSize: 1 });
  await sql.raw(`create database ${dbName}`).execute(admin.db);
  const token = randomBytes(24).toString('base64url');
  const dataDir = await mkdtemp(join(tmpdir(), 'minicloud-cluster-'));
  await mkdir(options.logDir, { recursive: true });
  const processes: HostProcess[] = [];
  let network: Network | undefined;
  let state: ClusterState | undefined;
  let api: Api | undefined;
  // On SIGINT/SIGTERM: remove what was made, then exit (a second signal exits at once).
  const interrupted = async (signal: NodeJS.Signals) => {
    process.once(signal, () => process.exit(130));
    options.say(`${signal}: tearing the cluster down`);
    for (const p of processes) p.child.kill('SIGKILL');
    await network?.teardown();
    await sql
      .raw(`drop database if exists ${dbName} with (force)`)
      .execute(admin.db)
      .catch(() => {});
    await rm(dataDir, { recursive: true, force: true });
    process.exit(130);
  };
  const onSignal = (signal: NodeJS.Signals) => void interrupted(signal);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    network = await Network.create({ pgPort: Number(base.port || 5432) });
    const processOptions: ProcessOptions = {
      cli: options.cli,
      databaseUrl: (host) => databaseUrlFor(base, dbName, host.gateway),
      dataDir,
      logDir: options.logDir,
      leaseMs: options.leaseMs,
      concurrency: options.concurrency,
      token,
      port: 8787,
      sabotage: options.sabotage,
      cpuProfileDir: options.cpuProfile ? join(options.logDir, 'profiles') : undefined,
    };
    const apiHosts = [];
    for (let i = 1; i <= options.apiHosts; i++) apiHosts.push(await network.addHost(`api-${i}`));
    const workerHosts = [];
    for (let i = 1; i <= options.workerHosts; i++) {
      workerHosts.push(await network.addHost(`worker-${i}`));
    }
    // The first API host migrates the database and seeds the compute node; then the rest.
    processes.push(await startProcess(apiHosts[0]!, 'serve', processOptions));
    const rest = await Promise.all([
      ...apiHosts.slice(1).map((h) => startProcess(h, 'serve', processOptions)),
      ...workerHosts.map((h) => startProcess(h, 'worker', processOptions)),
    ]);
    processes.push(...rest);
    const servers = processes.filter((p) => p.role === 'serve');
    const workers = processes.filter((p) => p.role === 'worker');
    options.say(
      `cluster up: ${servers.length} API host(s), ${workers.length} worker host(s) on ${network.hosts.map((h) => h.address).join(', ')}`,
    );
    state = await ClusterState.open(databaseUrlFor(base, dbName));
    api = new Api(
      servers.map((s) => s.url!),
      token,
    );
    const run = randomBytes(3).toString('hex');
    const before = await sample(state, processes);
    const capacity = new CapacityWatch(state);
    capacity.start();
    let injecting = options.faults.length > 0;
    const loading = runLoad(api, options.workload, `r${run}`, () => injecting);
    const overCommit =
      options.sabotage === 'over-commit'
        ? new Promise((resolve) => setTimeout(resolve, 2_000))
            .then(() => state!.overCommit('node-1', 1_500))
            .then((what) => options.say(`self-test: over-committed ${what}, then released`))
        : Promise.resolve();
    let faults: FaultRecord[] = [];
    try {
      if (injecting) {
        faults = await injectFaults({
          kinds: options.faults,
          workers,
          network,
          state,
          processOptions,
          leaseMs: options.leaseMs,
          say: options.say,
        });
      }
    } finally {
      injecting = false;
      // Replaced workers (after a kill) are stopped with the rest.
      for (const w of workers) if (!processes.includes(w)) processes.push(w);
    }
    const load = await loading;
    await overCommit;
    await capacity.stop();
    const usage = usageBetween(before, await sample(state, processes), processes);
    options.say(
      `load done: ${load.ops.length} container ops, ${load.placement.writes} Placement writes, ${load.deploys.ok + load.deploys.reverted} deploys, ${load.reshapes.ok} reshapes`,
    );
    const result = await verdict({
      api,
      state,
      load,
      faults,
      capacity,
      drainMs: options.drainMs ?? 60_000,
      ...(options.sabotage === 'verdict-500'
        ? { apiRead: (read) => state!.withInventoriesGone(read) }
        : {}),
    });
    return {
      verdict: result,
      faults,
      usage,
      hosts: network.hosts.map((h) => ({
        label: h.label,
        ns: h.ns,
        address: h.address,
        role: h.label.startsWith('api') ? 'serve' : 'worker',
        pids: processes.filter((p) => p.host === h).map((p) => p.pid),
      })),
      durationMs: Date.now() - started,
      ...(options.sabotage ? { sabotage: options.sabotage } : {}),
    };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    api?.close();
    await Promise.all(processes.map((p) => stopProcess(p, 15_000)));
    await state?.close();
    await network?.teardown();
    await sql
      .raw(`drop database if exists ${dbName} with (force)`)
      .execute(admin.db)
      .catch(() => {});
    await admin.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}
