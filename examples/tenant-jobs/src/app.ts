// Composing the packages with configuration only: per-tenant jobs on a durable queue
// (@rigging/async-queue), each job a flow of revertible tasks with a durable log
// (@rigging/tasks) run under a lease of @rigging/locks whose fencing token guards every write,
// and a tenant's teardown planned by @rigging/destroy-graph and run as a durable flow too.
import { createQueue, type Queue } from '@rigging/async-queue';
import { sqlBackend } from '@rigging/async-queue/sql';
import { ObjectGraph, type PlanJSON } from '@rigging/destroy-graph';
import { teardownFlow } from '@rigging/destroy-graph/tasks';
import { sqlFencingGuard, sqlLockProvider } from '@rigging/locks/sql';
import { openDatabase, type Database, type Migration } from '@rigging/sql';
import {
  Engine,
  flowHandler,
  linearFlow,
  task,
  type FlowHandlerContext,
  type TaskContext,
} from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';

/** The app's own tables: what the tasks create, and one row per applied effect. */
interface Tables {
  tenant_resources: { tenant: string; name: string; kind: string; flow_id: string };
  tenant_effects: { flow_id: string; task: string; token: string; pid: number };
}

const migrations: Migration[] = [
  {
    name: 'create tenant tables',
    up: async (db) => {
      await db.schema
        .createTable('tenant_resources')
        .addColumn('tenant', 'varchar(64)', (c) => c.notNull())
        .addColumn('name', 'varchar(64)', (c) => c.notNull())
        .addColumn('kind', 'varchar(32)', (c) => c.notNull())
        .addColumn('flow_id', 'varchar(128)', (c) => c.notNull())
        .addPrimaryKeyConstraint('tenant_resources_pk', ['tenant', 'name'])
        .execute();
      await db.schema
        .createTable('tenant_effects')
        .addColumn('flow_id', 'varchar(128)', (c) => c.notNull())
        .addColumn('task', 'varchar(64)', (c) => c.notNull())
        .addColumn('token', 'varchar(32)', (c) => c.notNull())
        .addColumn('pid', 'integer', (c) => c.notNull())
        .execute();
    },
  },
];

/** A job of a tenant: provision its resources, or tear them down along a plan. */
export interface Jobs {
  provision: { tenant: string };
  teardown: { tenant: string; plan: PlanJSON };
}

/** Options of {@link openApp}. */
export interface AppOptions {
  /** Database URL: `sqlite:<file>` (one machine) or `postgres://…` (many). */
  url: string;
  /** Run jobs in this process (false: only enqueue them). @default true */
  worker?: boolean;
  /** Lease of queue claims and flow locks: how soon a dead worker's job moves on. @default 5000 */
  leaseMs?: number;
  /** Called after each task's write committed (an observation point for tests and logs). */
  afterWrite?: (task: string, flowId: string) => void | Promise<void>;
  /** Called before each task's write (e.g. to simulate slow work). */
  beforeWrite?: (task: string, flowId: string) => void | Promise<void>;
  /** Called when a task's write is refused or fails (then the task fails with `error`). */
  writeFailed?: (task: string, flowId: string, error: unknown) => void;
}

/** The composed app: a queue whose jobs run flows under fenced leases. */
export interface App extends AsyncDisposable {
  readonly database: Database<Tables>;
  readonly queue: Queue<ReturnType<typeof handlersOf>>;
  readonly engine: Engine;
  /** The destruction plan of a tenant's resources (what `teardown` will destroy, in order). */
  planTeardown(tenant: string): Promise<PlanJSON>;
  close(): Promise<void>;
}

function handlersOf(
  engine: Engine,
  write: (ctx: TaskContext, tenant: string, name: string, kind: string) => Promise<void>,
) {
  const step = (name: string, kind: string) =>
    task({
      name: `create-${name}`,
      requires: ['tenant'],
      execute: (ctx, { tenant }: { tenant: string }) => write(ctx, tenant, name, kind),
    });
  const provision = linearFlow(
    'provision',
    step('network', 'network'),
    step('volume', 'volume'),
    step('server', 'server'),
  );
  return {
    provision: flowHandler(engine, provision),
    teardown: (payload: Jobs['teardown'], ctx: FlowHandlerContext) =>
      flowHandler(
        engine,
        teardownFlow(payload.plan, {
          name: 'teardown',
          destroy: async (object, taskCtx) => {
            const [, name] = object.id.split('/');
            await write(taskCtx, payload.tenant, name!, 'deleted');
          },
        }),
        { inputs: () => ({}) },
      )(payload, ctx),
  };
}

/** Opens the database, migrates every package's tables, and starts the queue. */
export async function openApp(options: AppOptions): Promise<App> {
  const leaseMs = options.leaseMs ?? 5000;
  const database = await openDatabase<Tables>(options.url);
  await database.migrate('tenant-jobs', migrations);
  const locks = sqlLockProvider(database, { name: 'tenant-jobs', ttlMs: leaseMs });
  const guard = sqlFencingGuard(database);
  await guard.migrate();
  const engine = new Engine({ log: await sqlLog(database), locks });

  // Every write is fenced by the flow's lease: a stale owner (paused past its lease while
  // another worker took the flow over) cannot commit anything.
  const write = async (ctx: TaskContext, tenant: string, name: string, kind: string) => {
    await options.beforeWrite?.(ctx.task, ctx.flowId);
    const token = ctx.lease!.token;
    await database
      .transaction(async (trx) => {
        await guard.check(trx, `flow:${ctx.flowId}`, token);
        await trx
          .deleteFrom('tenant_resources')
          .where('tenant', '=', tenant)
          .where('name', '=', name)
          .execute();
        if (kind !== 'deleted') {
          await trx
            .insertInto('tenant_resources')
            .values({ tenant, name, kind, flow_id: ctx.flowId })
            .execute();
        }
        await trx
          .insertInto('tenant_effects')
          .values({ flow_id: ctx.flowId, task: ctx.task, token: String(token), pid: process.pid })
          .execute();
      })
      .catch((error: unknown) => {
        options.writeFailed?.(ctx.task, ctx.flowId, error);
        throw error;
      });
    await options.afterWrite?.(ctx.task, ctx.flowId);
  };

  const queue = createQueue({
    backend: sqlBackend(database, { name: 'tenant-jobs' }),
    handlers: handlersOf(engine, write),
    worker: options.worker ?? true,
    leaseMs,
    policy: 'stop',
    concurrency: 4,
  });

  const close = async () => {
    await queue.close();
    await locks.close();
    await database.close();
  };
  return {
    database,
    queue,
    engine,
    async planTeardown(tenant) {
      const rows = await database.db
        .selectFrom('tenant_resources')
        .selectAll()
        .where('tenant', '=', tenant)
        .execute();
      // Nothing keeps the tenant's objects alive (no root): all of them are collected. The
      // server uses the volume and the network, so both are destroyed after it.
      const graph = new ObjectGraph();
      const objects = new Map(
        rows.map((r) => [r.kind, graph.add({ id: `${tenant}/${r.name}`, type: r.kind })]),
      );
      const server = objects.get('server');
      for (const kind of ['volume', 'network']) {
        const dependency = objects.get(kind);
        if (server && dependency) graph.subscribeDestruction(server, dependency);
      }
      return graph.planCollection().toJSON();
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
