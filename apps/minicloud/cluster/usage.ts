import { readdir, readFile } from 'node:fs/promises';
import { sql } from '@rigging/sql';
import type { HostProcess } from './processes.js';
import type { ClusterState } from './state.js';

/** What the machine spent during the load: the figures that say what saturates. */
export interface Usage {
  seconds: number;
  /** Busy share of all cores (1 = every core busy all the time). */
  machineBusy: number;
  cores: number;
  /**
   * CPU seconds per second (1 = one core) of the cluster's processes, by role; `load` is this
   * process: the load generator (and the sampling).
   */
  cpuByRole: Record<string, number>;
  /** CPU seconds per second of PostgreSQL's server processes. */
  postgresCpu: number;
  /**
   * Transactions committed per second in the run's database, read-only ones too, as PostgreSQL's
   * statistics count them (each backend reports its count now and then: ± a second's worth).
   */
  commitsPerSecond: number;
  /**
   * Transactions that wrote, per second, counted exactly: transaction ids the server assigned
   * (one per transaction that wrote — each a WAL flush at commit — in any database).
   */
  writesPerSecond: number;
}

interface Sample {
  at: number;
  busy: number;
  total: number;
  cores: number;
  ticks: Map<number, number>;
  postgres: number;
  commits: number;
  /** The next transaction id the server will assign. */
  nextXid: number;
}

const TICKS_PER_SECOND = 100;

/** This process (the load generator, and the sampling), counted as role `load`. */
const LOAD = { pid: process.pid, role: 'load' };

async function processTicks(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the command name (which may hold spaces): utime is the 14th, stime the 15th.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
}

async function postgresTicks(): Promise<number> {
  let ticks = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = await readFile(`/proc/${entry}/comm`, 'utf8').catch(() => '');
    if (comm.startsWith('postgres')) ticks += await processTicks(Number(entry));
  }
  return ticks;
}

/** Samples CPU and commits now; `usageBetween` turns two samples into rates. */
export async function sample(
  state: ClusterState,
  processes: readonly HostProcess[],
): Promise<Sample> {
  const stat = (await readFile('/proc/stat', 'utf8')).split('\n');
  const cpu = stat[0]!.split(/\s+/).slice(1).map(Number);
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0);
  const total = cpu.reduce((a, b) => a + b, 0);
  const ticks = new Map<number, number>();
  for (const p of [...processes, LOAD]) ticks.set(p.pid, await processTicks(p.pid));
  // Reading the next id assigns none (this transaction writes nothing).
  const { rows } = await sql<{ commits: string; next_xid: string }>`
    select xact_commit as commits, pg_snapshot_xmax(pg_current_snapshot())::text as next_xid
    from pg_stat_database where datname = current_database()
  `.execute(state.database.db);
  return {
    at: Date.now(),
    busy: total - idle,
    total,
    cores: stat.filter((l) => /^cpu\d/.test(l)).length,
    ticks,
    postgres: await postgresTicks(),
    commits: Number(rows[0]?.commits ?? 0),
    nextXid: Number(rows[0]?.next_xid ?? 0),
  };
}

/** Rates between two samples. */
export function usageBetween(a: Sample, b: Sample, processes: readonly HostProcess[]): Usage {
  const seconds = Math.max(0.001, (b.at - a.at) / 1000);
  const cpuByRole: Record<string, number> = {};
  for (const p of [...processes, LOAD]) {
    const spent = ((b.ticks.get(p.pid) ?? 0) - (a.ticks.get(p.pid) ?? 0)) / TICKS_PER_SECOND;
    cpuByRole[p.role] = (cpuByRole[p.role] ?? 0) + Math.max(0, spent) / seconds;
  }
  return {
    seconds,
    machineBusy: (b.busy - a.busy) / Math.max(1, b.total - a.total),
    cores: b.cores,
    cpuByRole,
    postgresCpu: (b.postgres - a.postgres) / TICKS_PER_SECOND / seconds,
    commitsPerSecond: (b.commits - a.commits) / seconds,
    writesPerSecond: (b.nextXid - a.nextXid) / seconds,
  };
}
