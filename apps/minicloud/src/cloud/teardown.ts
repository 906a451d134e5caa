import { randomUUID } from 'node:crypto';
import { RiggingError, type Clock } from '@rigging/core';
import { ObjectGraph, type DestructionPlan, type GraphObject } from '@rigging/destroy-graph';
import type { ReshapeStore } from '@rigging/reshape';
import type { Database } from '@rigging/sql';
import type { PlanView } from '../wire.js';
import type { MinicloudTables } from '../migrations.js';

interface ResourceValue {
  id: string;
  type: string;
  consumer: string | null;
}

/** What a teardown did. */
export interface TeardownReport {
  env: string;
  /** The plan, readable (`DestructionPlan.format()`). */
  planText: string;
  /** The plan in the dashboard's shape. */
  plan: PlanView;
  /** `subscriber ← publisher` notifications, in the order they ran. */
  notified: string[];
  /** Object ids in the order they were destroyed. */
  destroyed: string[];
  /** Reshape consumers whose allocations were released. */
  released: string[];
  failed: string[];
}

/** Hooks a teardown reports through while it runs. */
export interface TeardownHooks {
  onPlan?(plan: PlanView, text: string): void;
  onObject?(id: string, state: 'destroying' | 'destroyed' | 'failed'): void;
  onNotify?(subscriber: string, publisher: string): void;
}

/** What {@link teardownEnvironment} works with. */
export interface TeardownDeps {
  database: Database<MinicloudTables>;
  reshape: ReshapeStore;
  /** The time of the plan (`createdAt`, its id). */
  clock: Clock;
}

/**
 * Tears an environment down with the destroy graph: the environment owns its network, volumes,
 * VMs and app config; the network has a destruction dependency on every VM (it must outlive
 * them, as in the spec's example) and each volume on the VM it is attached to. The plan is
 * computed, subscribers are notified (reverse order), then objects are destroyed in order; each
 * VM's destroy releases its allocations in the reshape store.
 */
export async function teardownEnvironment(
  deps: TeardownDeps,
  env: string,
  hooks: TeardownHooks = {},
): Promise<TeardownReport> {
  const { database, reshape } = deps;
  const db = database.db;
  const rows = await db
    .selectFrom('minicloud_resources')
    .selectAll()
    .where('env', '=', env)
    .execute();
  const released: string[] = [];
  const notified: string[] = [];
  const remove = async (o: GraphObject<ResourceValue>) => {
    if (o.value.consumer) {
      try {
        await reshape.deleteAllocations(o.value.consumer);
        released.push(o.value.consumer);
      } catch (error) {
        if (!RiggingError.hasCode(error, 'reshape.consumer_not_found')) throw error;
      }
    }
    await db.deleteFrom('minicloud_resources').where('id', '=', o.value.id).execute();
  };
  const graph = new ObjectGraph({
    types: {
      environment: {
        destroy: async () => {
          await db.deleteFrom('minicloud_environments').where('name', '=', env).execute();
        },
      },
      network: { destroy: remove },
      volume: { destroy: remove },
      vm: { destroy: remove },
      'app-config': { destroy: remove },
    },
  });
  const root = graph.add<ResourceValue>({
    id: env,
    type: 'environment',
    value: { id: env, type: 'environment', consumer: null },
    root: true,
  });
  const objects = new Map<string, GraphObject<ResourceValue>>();
  for (const r of rows) {
    objects.set(
      r.id,
      graph.add<ResourceValue>({
        id: r.id,
        type: r.type,
        owner: root,
        value: { id: r.id, type: r.type, consumer: r.consumer },
      }),
    );
  }
  const byType = (t: string) => [...objects.values()].filter((o) => o.type === t);
  const notify = (publisher: GraphObject, ctx: { subscriber: GraphObject }) => {
    notified.push(`${ctx.subscriber.id} ← ${publisher.id}`);
    hooks.onNotify?.(ctx.subscriber.id, publisher.id);
  };
  for (const vm of byType('vm')) {
    for (const net of byType('network')) graph.subscribeDestruction(vm, net, notify);
    const data = rows.find((r) => r.id === vm.id)?.data;
    const volume = data ? (JSON.parse(data) as { volume?: string }).volume : undefined;
    const vol = volume ? objects.get(volume) : undefined;
    if (vol) graph.subscribeDestruction(vm, vol, notify);
  }
  for (const cfg of byType('app-config'))
    for (const vm of byType('vm')) graph.subscribeDestruction(cfg, vm, notify);

  const plan = graph.plan([...objects.values(), root]);
  const dash = toPlanView(plan, env, deps.clock.now());
  const text = plan.format();
  hooks.onPlan?.(dash, text);

  const destroyed: string[] = [];
  const failed: string[] = [];
  const offs = [
    graph.events.on('destroy:destroying', (e) => hooks.onObject?.(e.id, 'destroying')),
    graph.events.on('destroy:destroyed', (e) => {
      destroyed.push(e.id);
      hooks.onObject?.(e.id, 'destroyed');
    }),
    graph.events.on('destroy:failed', (e) => {
      failed.push(`${e.id}: ${e.error.message}`);
      hooks.onObject?.(e.id, 'failed');
    }),
  ];
  try {
    graph.removeRoot(root);
    await graph.destroy(plan, { concurrency: 1 });
  } finally {
    for (const off of offs) off();
  }
  return { env, planText: text, plan: dash, notified, destroyed, released, failed };
}

/** A destroy-graph plan in the dashboard's shape, made at `createdAt` (epoch ms). */
export function toPlanView(plan: DestructionPlan, root: string, createdAt: number): PlanView {
  return {
    id: `plan-${root}-${createdAt.toString(36)}-${randomUUID().slice(0, 8)}`,
    root,
    createdAt,
    groups: plan.groups.map((g) => g.map((o) => o.id)),
    objects: plan.groups.flat().map((o) => ({
      id: o.id,
      type: o.type,
      name: o.id.split('/').pop() ?? o.id,
      state: 'pending' as const,
    })),
    edges: plan.edges.map((e) => ({
      from: e.after,
      to: e.before,
      kind: e.reason === 'owner' ? ('owns' as const) : ('depends' as const),
      reason:
        e.reason === 'owner'
          ? `${e.after} owns ${e.before}`
          : `${e.after} depends on ${e.before}${e.transitive ? ' (transitively)' : ''}`,
    })),
    cycles: plan.cycles.map((c) => [...c.objects]),
  };
}
