import { openDatabase, sql, type Database } from '@rigging/sql';

/** One row of minicloud's journal: a container op began (`op-start`) or was applied (`op`). */
export interface JournalRow {
  kind: string;
  ref: string;
  pid: number;
  at: number;
}

/** A container op as the queue recorded it. */
export interface OpRow {
  id: string;
  key: string;
  status: string;
  attempts: number;
  createdAt: number;
  startedAt: number | undefined;
  finishedAt: number | undefined;
  /** The last failure's message and code (failed ops). */
  error: string | undefined;
}

/**
 * Reads what the cluster wrote, straight from PostgreSQL (from the machine, not through a
 * simulated host): the journal, the queue's ops, the task log and the flows. Read-only.
 */
export class ClusterState {
  private constructor(readonly database: Database) {}

  static async open(url: string): Promise<ClusterState> {
    return new ClusterState(await openDatabase(url, { poolSize: 2 }));
  }

  async journal(): Promise<JournalRow[]> {
    const { rows } = await sql<{ kind: string; ref: string; pid: number; at: string }>`
      select kind, ref, pid, at from minicloud_journal where kind in ('op-start', 'op') order by at
    `.execute(this.database.db);
    return rows.map((r) => ({ kind: r.kind, ref: r.ref, pid: Number(r.pid), at: Number(r.at) }));
  }

  /** Ops started by one of `pids` and not yet applied by anyone. */
  async inFlight(pids: readonly number[]): Promise<string[]> {
    if (pids.length === 0) return [];
    const { rows } = await sql<{ ref: string }>`
      select distinct s.ref from minicloud_journal s
      where s.kind = 'op-start' and s.pid in (${sql.join(pids)})
        and not exists (select 1 from minicloud_journal a where a.kind = 'op' and a.ref = s.ref)
    `.execute(this.database.db);
    return rows.map((r) => r.ref);
  }

  /** For each of `refs` started by a process other than `pid` since `since`: the first start. */
  async startedByOthers(
    refs: readonly string[],
    pid: number,
    since: number,
  ): Promise<Map<string, number>> {
    if (refs.length === 0) return new Map();
    const { rows } = await sql<{ ref: string; at: string }>`
      select ref, min(at) as at from minicloud_journal
      where kind = 'op-start' and pid <> ${pid} and at >= ${since} and ref in (${sql.join(refs)})
      group by ref
    `.execute(this.database.db);
    return new Map(rows.map((r) => [r.ref, Number(r.at)]));
  }

  async ops(ids: readonly string[]): Promise<Map<string, OpRow>> {
    const out = new Map<string, OpRow>();
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      const { rows } = await sql<Record<string, unknown>>`
        select id, op_key, status, attempts, created_at, started_at, finished_at, error
        from rigging_async_queue_ops where id in (${sql.join(chunk)})
      `.execute(this.database.db);
      for (const r of rows) {
        const n = (v: unknown) => (v == null ? undefined : Number(v));
        out.set(String(r.id), {
          id: String(r.id),
          key: String(r.op_key),
          status: String(r.status),
          attempts: Number(r.attempts),
          createdAt: Number(r.created_at),
          startedAt: n(r.started_at),
          finishedAt: n(r.finished_at),
          error: r.error == null ? undefined : describeError(String(r.error)),
        });
      }
    }
    return out;
  }

  /** Tasks that succeeded more than once in the same flow (a completed step run again). */
  async tasksRunTwice(): Promise<{ flowId: string; task: string; times: number }[]> {
    const { rows } = await sql<{ flow_id: string; task: string; n: string }>`
      select flow_id, task, count(*) as n from rigging_tasks_log
      where state = 'SUCCESS' and task is not null
      group by flow_id, task having count(*) > 1
    `.execute(this.database.db);
    return rows.map((r) => ({ flowId: r.flow_id, task: r.task, times: Number(r.n) }));
  }

  /** Flows by state (`SUCCESS`, `REVERTED`, … and anything left half-done). */
  async flowStates(): Promise<Map<string, number>> {
    const { rows } = await sql<{ state: string; n: string }>`
      select state, count(*) as n from rigging_tasks_flows group by state
    `.execute(this.database.db);
    return new Map(rows.map((r) => [r.state, Number(r.n)]));
  }

  close(): Promise<void> {
    return this.database.close();
  }
}

/** `message [code]` of a stored serialized error. */
function describeError(text: string): string {
  try {
    const e = JSON.parse(text) as { message?: string; code?: string };
    return `${e.message ?? text}${e.code ? ` [${e.code}]` : ''}`;
  } catch {
    return text;
  }
}
