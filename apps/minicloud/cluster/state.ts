import { randomUUID } from 'node:crypto';
import { openDatabase, sql, type Database } from '@rigging/sql';

/** One row of minicloud's journal: a container op began (`op-start`) or was applied (`op`). */
export interface JournalRow {
  kind: string;
  ref: string;
  pid: number;
  at: number;
}

/** One row of the container runtime's witness (`minicloud_effects`). */
export interface EffectRow {
  op: string;
  key: string;
  attempt: number;
  host: string;
  pid: number;
  token: number;
  /** Per-key sequence number of an accepted effect; undefined when refused. */
  seq: number | undefined;
  accepted: boolean;
  reason: string | undefined;
}

/** One provider's usage of one resource class against its capacity. */
export interface CapacityRow {
  provider: string;
  resourceClass: string;
  used: number;
  capacity: number;
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
 * simulated host): the journal, the queue's ops, the task log and the flows, the container
 * runtime's witness and reshape's usage. Read-only, except the two self-test saboteurs.
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

  /** Every effect the container runtime applied or refused, from its witness tables. */
  async effects(): Promise<EffectRow[]> {
    const { rows } = await sql<Record<string, unknown>>`
      select op_id, op_key, attempt, host, pid, token, seq, accepted, reason
      from minicloud_effects order by op_key, seq
    `.execute(this.database.db);
    return rows.map((r) => ({
      op: String(r.op_id),
      key: String(r.op_key),
      attempt: Number(r.attempt),
      host: String(r.host),
      pid: Number(r.pid),
      token: Number(r.token),
      seq: r.seq == null ? undefined : Number(r.seq),
      accepted: Number(r.accepted) === 1,
      reason: r.reason == null ? undefined : String(r.reason),
    }));
  }

  /** Usage against capacity of every provider's inventories, straight from reshape's tables. */
  async capacity(): Promise<CapacityRow[]> {
    const { rows } = await sql<Record<string, unknown>>`
      select p.name, i.resource_class, i.total, i.reserved, i.allocation_ratio,
        coalesce(sum(a.used), 0) as used
      from rigging_reshape_inventories i
      join rigging_reshape_providers p on p.uuid = i.provider_uuid
      left join rigging_reshape_allocations a
        on a.provider_uuid = i.provider_uuid and a.resource_class = i.resource_class
      group by p.name, i.resource_class, i.total, i.reserved, i.allocation_ratio
    `.execute(this.database.db);
    return rows.map((r) => ({
      provider: String(r.name),
      resourceClass: String(r.resource_class),
      used: Number(r.used),
      capacity: (Number(r.total) - Number(r.reserved)) * Number(r.allocation_ratio),
    }));
  }

  /**
   * Self-test `over-commit`: allocates one more VCPU than `provider` has, behind Placement's
   * back, for `holdMs`, then releases it. Resolves with what was allocated.
   */
  async overCommit(provider: string, holdMs: number): Promise<string> {
    const rows = await this.capacity();
    const row = rows.find((r) => r.provider === provider && r.resourceClass === 'VCPU');
    if (!row) throw new Error(`over-commit: ${provider} has no VCPU inventory yet`);
    const { rows: uuid } = await sql<{ uuid: string }>`
      select uuid from rigging_reshape_providers where name = ${provider}
    `.execute(this.database.db);
    const consumer = randomUUID();
    const used = Math.ceil(row.capacity - row.used) + 1;
    await sql`
      insert into rigging_reshape_allocations (consumer_uuid, provider_uuid, resource_class, used)
      values (${consumer}, ${uuid[0]!.uuid}, 'VCPU', ${used})
    `.execute(this.database.db);
    try {
      await new Promise((resolve) => setTimeout(resolve, holdMs));
    } finally {
      await sql`
        delete from rigging_reshape_allocations where consumer_uuid = ${consumer}
      `.execute(this.database.db);
    }
    return `${used} VCPU on ${provider} for ${holdMs} ms (consumer ${consumer})`;
  }

  /**
   * Self-test `verdict-500`: while `read` runs, reshape's inventory table is renamed away, so
   * the API host's Placement reads of inventories fail (500).
   */
  async withInventoriesGone<T>(read: () => Promise<T>): Promise<T> {
    await sql`alter table rigging_reshape_inventories rename to rigging_reshape_inventories_gone`.execute(
      this.database.db,
    );
    try {
      return await read();
    } finally {
      await sql`alter table rigging_reshape_inventories_gone rename to rigging_reshape_inventories`.execute(
        this.database.db,
      );
    }
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

  /** Flows not ended (neither `SUCCESS` nor `REVERTED`), up to `limit`: id, name, state and token. */
  async halfDoneFlows(limit = 5): Promise<string[]> {
    const { rows } = await sql<{
      flow_id: string;
      name: string;
      state: string;
      token: string | null;
    }>`
      select flow_id, name, state, token from rigging_tasks_flows
      where state not in ('SUCCESS', 'REVERTED') order by updated_at limit ${limit}
    `.execute(this.database.db);
    return rows.map((r) => `${r.flow_id} (${r.name}) ${r.state}, lease token ${r.token ?? '-'}`);
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
