import { randomUUID } from 'node:crypto';
import { silentLogger, systemClock, type Clock, type Logger } from '@rigging/core';
import {
  ReshapeNeeded,
  offlineReshape,
  updateProviderTree,
  type ProviderTree,
  type ProviderTreeDriver,
  type ReshapeStore,
  type TreeAllocations,
} from '@rigging/reshape';
import type { ProviderNode } from '../wire.js';
import { MinicloudError } from '../errors.js';

/** The simulated compute node: its name, physical GPUs and VGPUs per GPU. */
export interface ComputeNodeSpec {
  name: string;
  gpus: number;
  vgpusPerGpu: number;
}

export const NODE_1: ComputeNodeSpec = { name: 'node-1', gpus: 4, vgpusPerGpu: 4 };

/** The name of GPU `i`'s child provider. */
export const gpuName = (node: string, i: number): string => `${node}_pgpu${i}`;

/** The root provider of `node`, if it exists. */
export async function findNode(store: ReshapeStore, node: string): Promise<string | undefined> {
  const [p] = await store.listProviders({ name: node });
  return p?.uuid;
}

/**
 * "The previous version": creates `node` with all its VGPU inventory on the root and instances
 * already allocated against it, when the node does not exist yet. Returns its uuid and whether
 * it was created.
 */
export async function seedLegacyNode(
  store: ReshapeStore,
  spec: ComputeNodeSpec = NODE_1,
  instances = 6,
): Promise<{ uuid: string; created: boolean }> {
  const existing = await findNode(store, spec.name);
  if (existing) return { uuid: existing, created: false };
  const node = await store.createProvider({ name: spec.name });
  await store.setInventories(node.uuid, {
    generation: node.generation,
    inventories: {
      VCPU: { total: 64, allocationRatio: 4 },
      MEMORY_MB: { total: 262144, reserved: 4096 },
      DISK_GB: { total: 2000 },
      VGPU: { total: spec.gpus * spec.vgpusPerGpu },
    },
  });
  for (let i = 0; i < instances; i++) {
    await store.setAllocations(randomUUID(), {
      projectId: 'legacy',
      userId: 'ops',
      consumerGeneration: null,
      allocations: { [node.uuid]: { VCPU: 4, MEMORY_MB: 8192, VGPU: i % 3 === 0 ? 2 : 1 } },
    });
  }
  return { uuid: node.uuid, created: true };
}

/**
 * Today's virt driver for a node with `spec.gpus` physical GPUs: VGPU inventory lives on one
 * child provider per GPU. When the stored tree still has VGPUs on the root it throws
 * {@link ReshapeNeeded}; given the allocations, it moves each consumer's VGPUs to a GPU with room.
 */
export function gpuDriver(rootUuid: string, spec: ComputeNodeSpec = NODE_1): ProviderTreeDriver {
  return {
    updateProviderTree(tree: ProviderTree, allocations?: TreeAllocations) {
      const root = tree.data(rootUuid);
      for (let i = 0; i < spec.gpus; i++) {
        const name = gpuName(root.name, i);
        if (!tree.exists(name)) tree.newChild(name, root.uuid);
        tree.updateInventory(name, { VGPU: { total: spec.vgpusPerGpu } });
      }
      const { VGPU: onRoot, ...rest } = root.inventories;
      if (!onRoot) return; // already reshaped
      tree.updateInventory(root.uuid, rest);
      if (!allocations) {
        throw new ReshapeNeeded(
          `${root.name}: VGPU inventory moves from the root to ${spec.gpus} per-GPU providers`,
        );
      }
      const gpus = tree
        .children(root.uuid)
        .filter((c) => c.name.startsWith(`${root.name}_pgpu`))
        .map((c) => ({ uuid: c.uuid, free: spec.vgpusPerGpu }));
      for (const consumer of Object.values(allocations)) {
        const here = consumer.allocations[root.uuid];
        const vgpus = here?.VGPU;
        if (!here || !vgpus) continue;
        const gpu = gpus.find((g) => g.free >= vgpus);
        if (!gpu) throw new Error(`no GPU of ${root.name} has ${vgpus} free VGPUs`);
        delete here.VGPU;
        gpu.free -= vgpus;
        consumer.allocations[gpu.uuid] = { ...(consumer.allocations[gpu.uuid] ?? {}), VGPU: vgpus };
      }
    },
  };
}

/** The tree of `rootUuid` in the dashboard's shape, with usages. */
export async function treeSnapshot(store: ReshapeStore, rootUuid: string): Promise<ProviderNode[]> {
  const providers = await store.listProviders({ inTree: rootUuid });
  return Promise.all(
    providers.map(async (p) => {
      const [inv, usage] = await Promise.all([
        store.getInventories(p.uuid),
        store.getUsages(p.uuid),
      ]);
      const inventories: ProviderNode['inventories'] = {};
      for (const [rc, i] of Object.entries(inv.inventories)) {
        inventories[rc] = {
          total: i.total,
          reserved: i.reserved,
          allocationRatio: i.allocationRatio,
          used: usage.usages[rc] ?? 0,
        };
      }
      return {
        uuid: p.uuid,
        name: p.name,
        parent: p.parentProviderUuid,
        generation: p.generation,
        inventories,
      };
    }),
  );
}

/** Per consumer, the total of each resource class (to check nothing was lost in a reshape). */
function allocationTotals(allocations: TreeAllocations): Map<string, Record<string, number>> {
  const out = new Map<string, Record<string, number>>();
  for (const [consumer, a] of Object.entries(allocations)) {
    const totals: Record<string, number> = {};
    for (const resources of Object.values(a.allocations)) {
      for (const [rc, n] of Object.entries(resources)) totals[rc] = (totals[rc] ?? 0) + n;
    }
    out.set(consumer, totals);
  }
  return out;
}

/** Lines drawing a provider tree with usages, e.g. `node-1  VCPU 24/256  VGPU 8/16`. */
export function formatTree(nodes: readonly ProviderNode[]): string[] {
  const lines: string[] = [];
  const children = (parent: string | null) => nodes.filter((n) => n.parent === parent);
  const visit = (n: ProviderNode, depth: number) => {
    const inv = Object.entries(n.inventories)
      .map(([rc, i]) => `${rc} ${i.used}/${Math.floor((i.total - i.reserved) * i.allocationRatio)}`)
      .join('  ');
    lines.push(`${depth ? `${'  '.repeat(depth - 1)}└ ` : ''}${n.name}${inv ? `  ${inv}` : ''}`);
    for (const c of children(n.uuid)) visit(c, depth + 1);
  };
  const uuids = new Set(nodes.map((n) => n.uuid));
  for (const r of nodes.filter((n) => n.parent === null || !uuids.has(n.parent))) visit(r, 0);
  return lines;
}

/** What {@link reshapeNode} did. */
export interface ReshapeOutcome {
  node: string;
  rootUuid: string;
  /** True when the node was created as "the previous version" (VGPUs on the root, instances). */
  seeded: boolean;
  /** The driver's `ReshapeNeeded` message, when it raised one. */
  needed: string | null;
  reshaped: boolean;
  movedConsumers: string[];
  before: ProviderNode[];
  after: ProviderNode[];
  /** Consumers before / after, and consumers whose totals changed or vanished (must be empty). */
  consumersBefore: number;
  consumersAfter: number;
  lost: string[];
  durationMs: number;
}

function sortKeys(o: Record<string, number>): [string, number][] {
  return Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Runs the resource-tracker flow for `node` with reshapes allowed (service startup, or
 * `offline` for the upgrade script), seeding the legacy node first when `seed` is set, and
 * checks that no consumer's allocation totals changed.
 */
export async function reshapeNode(
  reshape: ReshapeStore,
  node: ComputeNodeSpec,
  options: { seed: boolean; offline: boolean; logger?: Logger; clock?: Clock },
): Promise<ReshapeOutcome> {
  const { seed, offline } = options;
  const logger = options.logger ?? silentLogger;
  const clock = options.clock ?? systemClock;
  const started = clock.now();
  let rootUuid: string | undefined;
  let seeded = false;
  if (seed) ({ uuid: rootUuid, created: seeded } = await seedLegacyNode(reshape, node));
  else rootUuid = await findNode(reshape, node.name);
  if (!rootUuid) {
    throw new MinicloudError(
      'minicloud.no_compute_node',
      `compute node ${node.name} is not in the database; nothing to reshape`,
    );
  }
  const before = await treeSnapshot(reshape, rootUuid);
  const allocationsBefore = await reshape.getAllocationsForProviderTree(rootUuid);
  let needed: string | null = null;
  const inner = gpuDriver(rootUuid, node);
  const driver = {
    async updateProviderTree(
      tree: Parameters<typeof inner.updateProviderTree>[0],
      allocations?: TreeAllocations,
    ) {
      try {
        await inner.updateProviderTree(tree, allocations);
      } catch (error) {
        if (error instanceof ReshapeNeeded) needed = error.message;
        throw error;
      }
    },
  };
  const opts = {
    rootUuid,
    rootName: node.name,
    logger: logger.child({ component: 'reshape' }),
  };
  const result = offline
    ? await offlineReshape(reshape, driver, opts)
    : await updateProviderTree(reshape, driver, { ...opts, startup: true });
  const after = await treeSnapshot(reshape, rootUuid);
  const allocationsAfter = await reshape.getAllocationsForProviderTree(rootUuid);
  const totalsBefore = allocationTotals(allocationsBefore);
  const totalsAfter = allocationTotals(allocationsAfter);
  const lost: string[] = [];
  for (const [consumer, totals] of totalsBefore) {
    if (
      JSON.stringify(sortKeys(totals)) !== JSON.stringify(sortKeys(totalsAfter.get(consumer) ?? {}))
    )
      lost.push(consumer);
  }
  return {
    node: node.name,
    rootUuid,
    seeded,
    needed,
    reshaped: result.reshaped,
    movedConsumers: result.movedConsumers,
    before,
    after,
    consumersBefore: totalsBefore.size,
    consumersAfter: totalsAfter.size,
    lost,
    durationMs: clock.now() - started,
  };
}
