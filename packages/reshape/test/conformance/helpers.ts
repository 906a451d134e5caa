import { randomUUID } from 'node:crypto';
import { RiggingError } from '@rigging/core';
import { expect } from 'vitest';
import { ReshapeNeeded, type ProviderTreeDriver, type ReshapeStore } from '../../src/index.js';

export const P = 'project';
export const U = 'user';

export async function expectCode(p: Promise<unknown>, code: string): Promise<RiggingError> {
  try {
    await p;
  } catch (error) {
    expect(RiggingError.isInstance(error), String(error)).toBe(true);
    expect((error as RiggingError).code, (error as Error).message).toBe(code);
    return error as RiggingError;
  }
  throw new Error(`expected ${code}, but it succeeded`);
}

/** Everything observable about some providers and consumers, to prove nothing changed. */
export async function dump(
  store: ReshapeStore,
  consumers: string[],
  inTree?: string,
): Promise<unknown> {
  const providers = await store.listProviders(inTree ? { inTree } : {});
  const out: unknown[] = [];
  for (const p of providers) {
    out.push(p, await store.getInventories(p.uuid), await store.getUsages(p.uuid));
    out.push(await store.getProviderAllocations(p.uuid));
  }
  for (const c of consumers) out.push(c, await store.getAllocations(c));
  return out;
}

/** A VGPU driver: the root's VGPU inventory becomes one child per physical GPU. */
export function vgpuDriver(gpus: number, perGpu: number): ProviderTreeDriver {
  return {
    updateProviderTree(tree, allocations) {
      const root = tree.roots()[0]!;
      if (!root.inventories.VGPU) return;
      for (let i = 0; i < gpus; i++) {
        if (!tree.exists(`${root.name}_pgpu${i}`))
          tree.newChild(`${root.name}_pgpu${i}`, root.uuid);
        tree.updateInventory(`${root.name}_pgpu${i}`, { VGPU: { total: perGpu } });
      }
      const { VGPU: _moved, ...rest } = root.inventories;
      tree.updateInventory(root.uuid, rest);
      if (!allocations) throw new ReshapeNeeded('VGPU inventory moves to per-GPU children');
      const children = tree.children(root.uuid);
      const free = children.map(() => perGpu);
      for (const a of Object.values(allocations)) {
        const here = a.allocations[root.uuid];
        const n = here?.VGPU;
        if (!here || !n) continue;
        delete here.VGPU;
        if (Object.keys(here).length === 0) delete a.allocations[root.uuid];
        const i = free.findIndex((f) => f >= n);
        free[i]! -= n;
        const child = children[i]!.uuid;
        a.allocations[child] = { ...a.allocations[child], VGPU: n };
      }
    },
  };
}

/** A compute node with `cpus` VCPU and the `extra` inventories (totals), at its new generation. */
export async function compute(store: ReshapeStore, cpus = 8, extra: Record<string, number> = {}) {
  const rp = await store.createProvider({ name: `cn-${randomUUID()}` });
  const inv: Record<string, { total: number }> = { VCPU: { total: cpus } };
  for (const [rc, total] of Object.entries(extra)) inv[rc] = { total };
  const r = await store.setInventories(rp.uuid, { generation: 0, inventories: inv });
  return { uuid: rp.uuid, generation: r.generation };
}
