import { randomUUID } from 'node:crypto';
import { RiggingError } from '@rigging/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ProviderTree,
  ReshapeFailed,
  ReshapeNeeded,
  reshapeDryRun,
  retryOnConflict,
  updateProviderTree,
  type AllocationMap,
  type AllocationsInput,
  type InventoriesInput,
  type ProviderTreeDriver,
  type ReshapeStore,
} from '../src/index.js';

const P = 'project';
const U = 'user';

async function expectCode(p: Promise<unknown>, code: string): Promise<RiggingError> {
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

/** The store conformance suite; `make` returns a fresh (empty) store for the whole suite. */
export function conformance(
  make: () => Promise<ReshapeStore>,
  teardown?: () => Promise<void>,
): void {
  let store: ReshapeStore;
  beforeAll(async () => {
    store = await make();
  });
  afterAll(async () => {
    await store?.close();
    await teardown?.();
  });

  async function compute(cpus = 8, extra: Record<string, number> = {}) {
    const rp = await store.createProvider({ name: `cn-${randomUUID()}` });
    const inv: Record<string, { total: number }> = { VCPU: { total: cpus } };
    for (const [rc, total] of Object.entries(extra)) inv[rc] = { total };
    const r = await store.setInventories(rp.uuid, { generation: 0, inventories: inv });
    return { uuid: rp.uuid, generation: r.generation };
  }

  describe('providers', () => {
    it('creates, lists in tree, updates and deletes providers', async () => {
      const root = await store.createProvider({ name: `root-${randomUUID()}` });
      expect(root).toMatchObject({
        parentProviderUuid: null,
        rootProviderUuid: root.uuid,
        generation: 0,
      });
      const child = await store.createProvider({
        name: `child-${randomUUID()}`,
        parentProviderUuid: root.uuid,
      });
      expect(child.rootProviderUuid).toBe(root.uuid);
      const grand = await store.createProvider({
        name: `g-${randomUUID()}`,
        parentProviderUuid: child.uuid,
      });
      const tree = await store.listProviders({ inTree: grand.uuid });
      expect(tree.map((p) => p.uuid)).toEqual([root.uuid, child.uuid, grand.uuid]);
      expect(await store.listProviders({ name: child.name })).toEqual([child]);
      await expectCode(store.createProvider({ name: child.name }), 'reshape.duplicate');
      await expectCode(
        store.createProvider({ name: 'x', parentProviderUuid: randomUUID() }),
        'reshape.provider_not_found',
      );
      await expectCode(store.deleteProvider(child.uuid), 'reshape.provider_has_children');
      await expectCode(
        store.updateProvider(root.uuid, { parentProviderUuid: grand.uuid }),
        'reshape.invalid_input',
      );
      const other = await store.createProvider({ name: `other-${randomUUID()}` });
      const moved = await store.updateProvider(child.uuid, {
        parentProviderUuid: other.uuid,
        name: `moved-${randomUUID()}`,
      });
      expect(moved.rootProviderUuid).toBe(other.uuid);
      expect((await store.getProvider(grand.uuid))!.rootProviderUuid).toBe(other.uuid);
      await store.deleteProvider(grand.uuid);
      expect(await store.getProvider(grand.uuid)).toBeUndefined();
      await expectCode(store.deleteProvider(grand.uuid), 'reshape.provider_not_found');
    });

    it('refuses to delete a provider with allocations', async () => {
      const cn = await compute();
      const c = randomUUID();
      await store.setAllocations(c, {
        projectId: P,
        userId: U,
        consumerGeneration: null,
        allocations: { [cn.uuid]: { VCPU: 1 } },
      });
      await expectCode(store.deleteProvider(cn.uuid), 'reshape.provider_in_use');
      await store.deleteAllocations(c);
      await store.deleteProvider(cn.uuid);
    });
  });

  describe('inventories', () => {
    it('checks the provider generation and reports expected vs actual', async () => {
      const cn = await compute();
      expect(cn.generation).toBe(1);
      const e = await expectCode(
        store.setInventories(cn.uuid, { generation: 0, inventories: { VCPU: { total: 4 } } }),
        'reshape.concurrent_update',
      );
      expect(e.details).toMatchObject({
        entity: 'provider',
        uuid: cn.uuid,
        expected: 0,
        actual: 1,
      });
      const got = await store.getInventories(cn.uuid);
      expect(got.inventories.VCPU).toEqual({
        total: 8,
        reserved: 0,
        minUnit: 1,
        maxUnit: 2147483647,
        stepSize: 1,
        allocationRatio: 1,
      });
    });

    it('rejects invalid inventories and unknown classes', async () => {
      const cn = await compute();
      for (const bad of [
        { total: 0 },
        { total: 4, reserved: 5 },
        { total: 4, minUnit: 3, maxUnit: 2 },
        { total: 4, allocationRatio: 0 },
        { total: 1.5 },
      ])
        await expectCode(
          store.setInventories(cn.uuid, { generation: cn.generation, inventories: { VCPU: bad } }),
          'reshape.invalid_input',
        );
      await expectCode(
        store.setInventories(cn.uuid, {
          generation: cn.generation,
          inventories: { CUSTOM_NOPE: { total: 1 } },
        }),
        'reshape.resource_class_not_found',
      );
      await expectCode(
        store.setInventories(cn.uuid, {
          generation: cn.generation,
          inventories: { bogus: { total: 1 } },
        }),
        'reshape.invalid_input',
      );
      await expectCode(
        store.setInventories(randomUUID(), { generation: 0, inventories: {} }),
        'reshape.provider_not_found',
      );
    });

    it('refuses to remove inventory in use, allows other changes', async () => {
      const cn = await compute(8, { MEMORY_MB: 1024 });
      const c = randomUUID();
      await store.setAllocations(c, {
        projectId: P,
        userId: U,
        allocations: { [cn.uuid]: { VCPU: 2 } },
      });
      const { generation } = await store.getInventories(cn.uuid);
      await expectCode(
        store.setInventories(cn.uuid, { generation, inventories: { MEMORY_MB: { total: 1024 } } }),
        'reshape.inventory_in_use',
      );
      const r = await store.setInventories(cn.uuid, {
        generation,
        inventories: { VCPU: { total: 4 } },
      });
      expect(Object.keys(r.inventories)).toEqual(['VCPU']);
    });
  });

  describe('allocations', () => {
    it('enforces capacity = (total - reserved) * allocation_ratio', async () => {
      const rp = await store.createProvider({ name: `cap-${randomUUID()}` });
      await store.setInventories(rp.uuid, {
        generation: 0,
        inventories: { VCPU: { total: 4, reserved: 1, allocationRatio: 2 } },
      });
      const a = randomUUID();
      await store.setAllocations(a, {
        projectId: P,
        userId: U,
        allocations: { [rp.uuid]: { VCPU: 6 } },
      });
      const e = await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          allocations: { [rp.uuid]: { VCPU: 1 } },
        }),
        'reshape.capacity_exceeded',
      );
      expect(e.details).toMatchObject({ capacity: 6, used: 7 });
      expect((await store.getUsages(rp.uuid)).usages).toEqual({ VCPU: 6 });
      // Shrinking one's own allocation is always allowed.
      await store.setAllocations(a, {
        projectId: P,
        userId: U,
        allocations: { [rp.uuid]: { VCPU: 5 } },
      });
    });

    it('checks capacity on every write as Placement does', async () => {
      const rp = await store.createProvider({ name: `over-${randomUUID()}` });
      await store.setInventories(rp.uuid, {
        generation: 0,
        inventories: { VCPU: { total: 64 }, MEMORY_MB: { total: 4096 } },
      });
      const [a, b] = [randomUUID(), randomUUID()];
      const alloc = (resources: Record<string, number>, consumerGeneration: number | null) => ({
        projectId: P,
        userId: U,
        consumerGeneration,
        allocations: { [rp.uuid]: resources },
      });
      await store.setAllocations(a, alloc({ VCPU: 8, MEMORY_MB: 1024 }, null));
      await store.setAllocations(b, alloc({ VCPU: 8 }, null));
      let generation = (await store.getProvider(rp.uuid))!.generation;
      const before = await dump(store, [a, b], rp.uuid);
      // A reshape that lowers an inventory below the allocations it keeps: refused.
      const reshape = (vcpus: number, resources: Record<string, number>) =>
        store.reshape({
          inventories: {
            [rp.uuid]: {
              generation,
              inventories: { VCPU: { total: vcpus }, MEMORY_MB: { total: 4096 } },
            },
          },
          allocations: { [a]: alloc(resources, 1) },
        });
      await expectCode(reshape(1, { VCPU: 8, MEMORY_MB: 1024 }), 'reshape.capacity_exceeded');
      // Shrinking the written allocation does not help while another consumer keeps 8.
      await expectCode(reshape(1, { VCPU: 1, MEMORY_MB: 1024 }), 'reshape.capacity_exceeded');
      // Nor does dropping it: every inventory a reshape sets must hold its usage.
      await expectCode(reshape(4, { MEMORY_MB: 1024 }), 'reshape.capacity_exceeded');
      expect(await dump(store, [a, b], rp.uuid)).toEqual(before);

      // An inventory update may go below usage (Placement only warns).
      generation = (
        await store.setInventories(rp.uuid, {
          generation,
          inventories: { VCPU: { total: 4 }, MEMORY_MB: { total: 4096 } },
        })
      ).generation;
      expect((await store.getUsages(rp.uuid)).usages).toEqual({ VCPU: 16, MEMORY_MB: 1024 });
      // Writing an allocation against the over-committed inventory fails, changed or not.
      const overCommitted = await dump(store, [a, b], rp.uuid);
      for (const resources of [
        { VCPU: 8, MEMORY_MB: 1024 },
        { VCPU: 2, MEMORY_MB: 1024 },
        { VCPU: 8, MEMORY_MB: 2048 },
      ]) {
        const e = await expectCode(
          store.setAllocations(a, alloc(resources, 1)),
          'reshape.capacity_exceeded',
        );
        expect(e.details).toMatchObject({ uuid: rp.uuid, resourceClass: 'VCPU', capacity: 4 });
      }
      expect(await dump(store, [a, b], rp.uuid)).toEqual(overCommitted);
      // Leaving the over-committed class alone is allowed.
      await store.setAllocations(a, alloc({ MEMORY_MB: 1024 }, 1));
      expect((await store.getUsages(rp.uuid)).usages).toEqual({ VCPU: 8, MEMORY_MB: 1024 });
    });

    it('enforces min_unit, max_unit and step_size', async () => {
      const rp = await store.createProvider({ name: `units-${randomUUID()}` });
      await store.setInventories(rp.uuid, {
        generation: 0,
        inventories: { MEMORY_MB: { total: 4096, minUnit: 256, maxUnit: 2048, stepSize: 256 } },
      });
      for (const n of [128, 4096, 300])
        await expectCode(
          store.setAllocations(randomUUID(), {
            projectId: P,
            userId: U,
            allocations: { [rp.uuid]: { MEMORY_MB: n } },
          }),
          'reshape.invalid_allocation',
        );
      await store.setAllocations(randomUUID(), {
        projectId: P,
        userId: U,
        allocations: { [rp.uuid]: { MEMORY_MB: 512 } },
      });
      await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          allocations: { [rp.uuid]: { DISK_GB: 1 } },
        }),
        'reshape.invalid_allocation',
      );
      await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          allocations: { [randomUUID()]: { DISK_GB: 1 } },
        }),
        'reshape.provider_not_found',
      );
      await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          allocations: { [rp.uuid]: { MEMORY_MB: 0 } },
        }),
        'reshape.invalid_input',
      );
    });

    it('checks consumer generations', async () => {
      const cn = await compute();
      const c = randomUUID();
      const first = await store.setAllocations(c, {
        projectId: P,
        userId: U,
        consumerGeneration: null,
        allocations: { [cn.uuid]: { VCPU: 1 } },
      });
      expect(first.consumerGeneration).toBe(1);
      let e = await expectCode(
        store.setAllocations(c, {
          projectId: P,
          userId: U,
          consumerGeneration: null,
          allocations: { [cn.uuid]: { VCPU: 2 } },
        }),
        'reshape.concurrent_update',
      );
      expect(e.details).toMatchObject({ entity: 'consumer', uuid: c, expected: null, actual: 1 });
      e = await expectCode(
        store.setAllocations(c, {
          projectId: P,
          userId: U,
          consumerGeneration: 7,
          allocations: { [cn.uuid]: { VCPU: 2 } },
        }),
        'reshape.concurrent_update',
      );
      expect(e.details).toMatchObject({ expected: 7, actual: 1 });
      await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          consumerGeneration: 3,
          allocations: { [cn.uuid]: { VCPU: 1 } },
        }),
        'reshape.concurrent_update',
      );
      const second = await store.setAllocations(c, {
        projectId: P,
        userId: U,
        consumerGeneration: 1,
        allocations: { [cn.uuid]: { VCPU: 2 } },
      });
      expect(second.consumerGeneration).toBe(2);
      await expectCode(
        store.deleteAllocations(c, { consumerGeneration: 1 }),
        'reshape.concurrent_update',
      );
      await store.deleteAllocations(c, { consumerGeneration: 2 });
      expect(await store.getAllocations(c)).toBeUndefined();
      await expectCode(store.deleteAllocations(c), 'reshape.consumer_not_found');
      expect((await store.getUsages(cn.uuid)).usages).toEqual({ VCPU: 0 });
    });

    it('replaces allocations row by row: kept, changed, removed, added, owner changed', async () => {
      const a = await compute(64, { MEMORY_MB: 4096, DISK_GB: 100 });
      const b = await compute(64, { MEMORY_MB: 4096 });
      const consumers = Array.from({ length: 30 }, () => randomUUID());
      await store.reshape({
        allocations: Object.fromEntries(
          consumers.map((c) => [
            c,
            {
              projectId: P,
              userId: U,
              consumerGeneration: null,
              allocations: { [a.uuid]: { VCPU: 1, MEMORY_MB: 64, DISK_GB: 2 } },
            },
          ]),
        ),
      });
      // Each consumer: VCPU kept, MEMORY_MB changed, DISK_GB removed, a row added on b; every
      // third also changes project; the last one loses everything (deleted).
      const next = (i: number): AllocationsInput => ({
        projectId: i % 3 === 0 ? 'other' : P,
        userId: U,
        consumerGeneration: 1,
        allocations:
          i === consumers.length - 1
            ? {}
            : { [a.uuid]: { VCPU: 1, MEMORY_MB: 128 }, [b.uuid]: { MEMORY_MB: 32 } },
      });
      const r = await store.reshape({
        allocations: Object.fromEntries(consumers.map((c, i) => [c, next(i)])),
      });
      expect(r.consumerGenerations[consumers[0]!]).toBe(2);
      expect(r.consumerGenerations[consumers.at(-1)!]).toBeNull();
      for (const [i, c] of consumers.entries()) {
        const got = await store.getAllocations(c);
        if (i === consumers.length - 1) {
          expect(got).toBeUndefined();
          continue;
        }
        expect(got).toEqual({
          projectId: i % 3 === 0 ? 'other' : P,
          userId: U,
          consumerGeneration: 2,
          allocations: { [a.uuid]: { VCPU: 1, MEMORY_MB: 128 }, [b.uuid]: { MEMORY_MB: 32 } },
        });
      }
      const n = consumers.length - 1;
      expect((await store.getUsages(a.uuid)).usages).toEqual({
        VCPU: n,
        MEMORY_MB: 128 * n,
        DISK_GB: 0,
      });
      expect((await store.getUsages(b.uuid)).usages).toEqual({ VCPU: 0, MEMORY_MB: 32 * n });
    });

    it('keeps consumer types and sums usages per project, user and consumer type', async () => {
      const cn = await compute(64, { MEMORY_MB: 4096 });
      const project = `p-${randomUUID()}`;
      const [a, b, c, d] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
      await store.reshape({
        allocations: {
          [a]: {
            projectId: project,
            userId: 'u1',
            consumerType: 'INSTANCE',
            allocations: { [cn.uuid]: { VCPU: 2, MEMORY_MB: 256 } },
          },
          [b]: {
            projectId: project,
            userId: 'u2',
            consumerType: 'INSTANCE',
            allocations: { [cn.uuid]: { VCPU: 1 } },
          },
          [c]: {
            projectId: project,
            userId: 'u1',
            consumerType: 'MIGRATION',
            allocations: { [cn.uuid]: { MEMORY_MB: 128 } },
          },
          [d]: { projectId: project, userId: 'u1', allocations: { [cn.uuid]: { VCPU: 4 } } },
        },
      });
      expect((await store.getAllocations(a))?.consumerType).toBe('INSTANCE');
      expect(await store.getAllocations(d)).not.toHaveProperty('consumerType');
      // Omitted on a later write: the type is kept.
      await store.setAllocations(a, {
        projectId: project,
        userId: 'u1',
        allocations: { [cn.uuid]: { VCPU: 3, MEMORY_MB: 256 } },
      });
      expect((await store.getAllocations(a))?.consumerType).toBe('INSTANCE');
      expect((await store.getAllocationsForProviderTree(cn.uuid))[c]?.consumerType).toBe(
        'MIGRATION',
      );
      await expectCode(
        store.setAllocations(randomUUID(), {
          projectId: project,
          userId: 'u1',
          consumerType: 'lower',
          allocations: { [cn.uuid]: { VCPU: 1 } },
        }),
        'reshape.invalid_input',
      );
      expect(await store.getTotalUsages({ projectId: project })).toEqual({
        usages: { VCPU: 8, MEMORY_MB: 384 },
        consumerCount: 4,
        byConsumerType: {
          INSTANCE: { usages: { VCPU: 4, MEMORY_MB: 256 }, consumerCount: 2 },
          MIGRATION: { usages: { MEMORY_MB: 128 }, consumerCount: 1 },
          unknown: { usages: { VCPU: 4 }, consumerCount: 1 },
        },
      });
      expect(await store.getTotalUsages({ projectId: project, userId: 'u2' })).toEqual({
        usages: { VCPU: 1 },
        consumerCount: 1,
        byConsumerType: { INSTANCE: { usages: { VCPU: 1 }, consumerCount: 1 } },
      });
      expect(await store.getTotalUsages({ projectId: 'nobody' })).toEqual({
        usages: {},
        consumerCount: 0,
        byConsumerType: {},
      });
    });

    it('gathers the allocations of a provider tree, including those outside it', async () => {
      const root = await compute(8);
      const child = await store.createProvider({
        name: `c-${randomUUID()}`,
        parentProviderUuid: root.uuid,
      });
      await store.setInventories(child.uuid, {
        generation: 0,
        inventories: { VGPU: { total: 4 } },
      });
      const sharing = await compute(8, { DISK_GB: 100 });
      const a = randomUUID();
      const b = randomUUID();
      await store.setAllocations(a, {
        projectId: P,
        userId: U,
        allocations: { [child.uuid]: { VGPU: 1 }, [sharing.uuid]: { DISK_GB: 10 } },
      });
      await store.setAllocations(b, {
        projectId: P,
        userId: U,
        allocations: { [sharing.uuid]: { DISK_GB: 10 } },
      });
      const got = await store.getAllocationsForProviderTree(root.uuid);
      expect(Object.keys(got)).toEqual([a]);
      expect(got[a]!.allocations).toEqual({
        [child.uuid]: { VGPU: 1 },
        [sharing.uuid]: { DISK_GB: 10 },
      });
      expect((await store.getProviderAllocations(sharing.uuid)).allocations).toEqual({
        [a]: { DISK_GB: 10 },
        [b]: { DISK_GB: 10 },
      });
    });
  });

  describe('reshape', () => {
    async function setup() {
      const root = await compute(8, { VGPU: 4 });
      const child = await store.createProvider({
        name: `gpu-${randomUUID()}`,
        parentProviderUuid: root.uuid,
      });
      const consumers = [randomUUID(), randomUUID()];
      for (const c of consumers)
        await store.setAllocations(c, {
          projectId: P,
          userId: U,
          allocations: { [root.uuid]: { VCPU: 1, VGPU: 2 } },
        });
      const rootGen = (await store.getProvider(root.uuid))!.generation;
      const good = (): {
        inventories: Record<string, InventoriesInput>;
        allocations: Record<string, AllocationsInput>;
      } => ({
        inventories: {
          [root.uuid]: { generation: rootGen, inventories: { VCPU: { total: 8 } } },
          [child.uuid]: { generation: 0, inventories: { VGPU: { total: 4 } } },
        },
        allocations: Object.fromEntries(
          consumers.map((c): [string, AllocationsInput] => [
            c,
            {
              projectId: P,
              userId: U,
              consumerGeneration: 1,
              allocations: { [root.uuid]: { VCPU: 1 }, [child.uuid]: { VGPU: 2 } } as AllocationMap,
            },
          ]),
        ),
      });
      return { root, child, consumers, good };
    }

    it('moves inventories and allocations together', async () => {
      const { root, child, consumers, good } = await setup();
      const result = await store.reshape(good());
      expect(result.consumerGenerations).toEqual({ [consumers[0]!]: 2, [consumers[1]!]: 2 });
      expect((await store.getUsages(root.uuid)).usages).toEqual({ VCPU: 2 });
      expect((await store.getUsages(child.uuid)).usages).toEqual({ VGPU: 4 });
      expect((await store.getProvider(child.uuid))!.generation).toBe(
        result.providerGenerations[child.uuid],
      );
    });

    const failures: [string, string, (r: Awaited<ReturnType<typeof setup>>) => unknown][] = [
      [
        'a stale provider generation',
        'reshape.concurrent_update',
        ({ good, root }) => {
          const r = good();
          r.inventories[root.uuid]!.generation -= 1;
          return r;
        },
      ],
      [
        'a stale consumer generation',
        'reshape.concurrent_update',
        ({ good, consumers }) => {
          const r = good();
          r.allocations[consumers[1]!]!.consumerGeneration = 0;
          return r;
        },
      ],
      [
        'too little capacity',
        'reshape.capacity_exceeded',
        ({ good, child }) => {
          const r = good();
          r.inventories[child.uuid]!.inventories = { VGPU: { total: 3 } };
          return r;
        },
      ],
      [
        'a step violation',
        'reshape.invalid_allocation',
        ({ good, child }) => {
          const r = good();
          r.inventories[child.uuid]!.inventories = { VGPU: { total: 4, stepSize: 4 } };
          return r;
        },
      ],
      [
        'a max_unit violation',
        'reshape.invalid_allocation',
        ({ good, child }) => {
          const r = good();
          r.inventories[child.uuid]!.inventories = { VGPU: { total: 4, maxUnit: 1 } };
          return r;
        },
      ],
      [
        'inventory removed while in use',
        'reshape.inventory_in_use',
        ({ good, root, consumers }) => {
          const r = good();
          delete r.allocations[consumers[0]!];
          void root;
          return r;
        },
      ],
      [
        'an unknown provider',
        'reshape.provider_not_found',
        ({ good }) => {
          const r = good();
          (r.inventories as Record<string, unknown>)[randomUUID()] = {
            generation: 0,
            inventories: {},
          };
          return r;
        },
      ],
      [
        'an unknown resource class',
        'reshape.resource_class_not_found',
        ({ good, child }) => {
          const r = good();
          r.inventories[child.uuid]!.inventories = {
            VGPU: { total: 4 },
            CUSTOM_UNKNOWN: { total: 1 },
          } as never;
          return r;
        },
      ],
    ];
    for (const [what, code, mutate] of failures) {
      it(`changes nothing on ${what}`, async () => {
        const s = await setup();
        const before = await dump(store, s.consumers, s.root.uuid);
        const req = mutate(s) as Parameters<ReshapeStore['reshape']>[0];
        await expectCode(store.reshape(req), code);
        expect(await dump(store, s.consumers, s.root.uuid)).toEqual(before);
        const report = await reshapeDryRun(store, req);
        expect(report.ok).toBe(false);
        expect(report.problems.map((p) => p.code)).toContain(code);
      });
    }

    it('dry-runs: reports the diff and writes nothing', async () => {
      const s = await setup();
      const before = await dump(store, s.consumers, s.root.uuid);
      const report = await reshapeDryRun(store, s.good());
      expect(report.ok).toBe(true);
      expect(report.allocations).toHaveLength(2);
      expect(report.inventories.map((i) => i.uuid).sort()).toEqual(
        [s.root.uuid, s.child.uuid].sort(),
      );
      expect(report.usages).toContainEqual({
        uuid: s.child.uuid,
        resourceClass: 'VGPU',
        before: 0,
        after: 4,
      });
      expect(await dump(store, s.consumers, s.root.uuid)).toEqual(before);
    });

    it('renames a custom resource class', async () => {
      await store.createResourceClass('CUSTOM_OLD_GPU');
      await store.createResourceClass('CUSTOM_NEW_GPU');
      expect(await store.createResourceClass('CUSTOM_NEW_GPU')).toBe(false);
      const cn = await store.createProvider({ name: `rename-${randomUUID()}` });
      await store.setInventories(cn.uuid, {
        generation: 0,
        inventories: { CUSTOM_OLD_GPU: { total: 4 } },
      });
      const consumers = [randomUUID(), randomUUID(), randomUUID()];
      for (const c of consumers)
        await store.setAllocations(c, {
          projectId: P,
          userId: U,
          allocations: { [cn.uuid]: { CUSTOM_OLD_GPU: 1 } },
        });
      await expectCode(
        store.deleteResourceClass('CUSTOM_OLD_GPU'),
        'reshape.resource_class_in_use',
      );
      const tree = await ProviderTree.fromStore(store, cn.uuid);
      const all = await store.getAllocationsForProviderTree(cn.uuid);
      await store.reshape({
        inventories: {
          [cn.uuid]: {
            generation: tree.data(cn.uuid).generation!,
            inventories: { CUSTOM_NEW_GPU: { total: 4 } },
          },
        },
        allocations: Object.fromEntries(
          Object.entries(all).map(([c, a]) => [
            c,
            {
              ...a,
              allocations: {
                [cn.uuid]: { CUSTOM_NEW_GPU: a.allocations[cn.uuid]!.CUSTOM_OLD_GPU! },
              },
            },
          ]),
        ),
      });
      expect((await store.getUsages(cn.uuid)).usages).toEqual({ CUSTOM_NEW_GPU: 3 });
      await store.deleteResourceClass('CUSTOM_OLD_GPU');
      expect(await store.listResourceClasses()).not.toContain('CUSTOM_OLD_GPU');
    });
  });

  describe('resource-tracker flow', () => {
    async function vgpuHost(consumers: number) {
      const root = await store.createProvider({ name: `host-${randomUUID()}` });
      await store.setInventories(root.uuid, {
        generation: 0,
        inventories: { VCPU: { total: 64 }, VGPU: { total: 8 } },
      });
      const ids: string[] = [];
      for (let i = 0; i < consumers; i++) {
        const c = randomUUID();
        ids.push(c);
        await store.setAllocations(c, {
          projectId: P,
          userId: U,
          allocations: { [root.uuid]: { VCPU: 2, VGPU: 1 } },
        });
      }
      return { root, ids };
    }

    it('reshapes VGPU inventory into per-GPU children at startup, usages identical in sum', async () => {
      const { root, ids } = await vgpuHost(6);
      await expectCode(
        updateProviderTree(store, vgpuDriver(2, 4), { rootUuid: root.uuid }),
        'reshape.reshape_needed',
      );
      const result = await updateProviderTree(store, vgpuDriver(2, 4), {
        rootUuid: root.uuid,
        startup: true,
      });
      expect(result.reshaped).toBe(true);
      expect(result.movedConsumers.sort()).toEqual([...ids].sort());
      const providers = await store.listProviders({ inTree: root.uuid });
      expect(providers).toHaveLength(3);
      let vgpu = 0;
      for (const p of providers) vgpu += (await store.getUsages(p.uuid)).usages.VGPU ?? 0;
      expect(vgpu).toBe(6);
      expect((await store.getUsages(root.uuid)).usages).toEqual({ VCPU: 12 });
      for (const c of ids) {
        const a = (await store.getAllocations(c))!;
        expect(a.allocations[root.uuid]).toEqual({ VCPU: 2 });
        expect(Object.keys(a.allocations)).toHaveLength(2);
      }
      // A second run has nothing to do.
      const again = await updateProviderTree(store, vgpuDriver(2, 4), { rootUuid: root.uuid });
      expect(again.reshaped).toBe(false);
      expect(again.diff.added).toEqual([]);
      expect(again.diff.inventories).toEqual([]);
    });

    it('wraps a failed flush in ReshapeFailed and changes nothing', async () => {
      const { root, ids } = await vgpuHost(6);
      const before = await dump(store, ids, root.uuid);
      // Every VGPU goes to one child of 2: the capacity check fails the whole reshape.
      const wrapped: ProviderTreeDriver = {
        updateProviderTree(tree, allocations) {
          if (!tree.exists('overfull')) tree.newChild('overfull', root.uuid);
          tree.updateInventory('overfull', { VGPU: { total: 2 } });
          tree.updateInventory(root.uuid, { VCPU: { total: 64 } });
          if (!allocations) throw new ReshapeNeeded();
          const child = tree.data('overfull').uuid;
          for (const a of Object.values(allocations)) {
            const n = a.allocations[root.uuid]!.VGPU!;
            delete a.allocations[root.uuid]!.VGPU;
            a.allocations[child] = { VGPU: n };
          }
        },
      };
      const e = await updateProviderTree(store, wrapped, {
        rootUuid: root.uuid,
        startup: true,
      }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ReshapeFailed);
      expect((e as ReshapeFailed).code).toBe('reshape.reshape_failed');
      expect(RiggingError.hasCode((e as Error).cause, 'reshape.capacity_exceeded')).toBe(true);
      // The new child exists (empty), but inventories and allocations did not move.
      expect((await store.getUsages(root.uuid)).usages).toEqual({ VCPU: 12, VGPU: 6 });
      for (const c of ids)
        expect(Object.keys((await store.getAllocations(c))!.allocations)).toEqual([root.uuid]);
      expect((await store.getInventories(root.uuid)).inventories.VGPU?.total).toBe(8);
      void before;
    });

    it('retries on conflict with fresh state', async () => {
      const cn = await compute();
      let calls = 0;
      const r = await retryOnConflict(
        () => store.getInventories(cn.uuid),
        async (state) => {
          calls++;
          const generation = calls === 1 ? state.generation - 1 : state.generation;
          return store.setInventories(cn.uuid, {
            generation,
            inventories: { VCPU: { total: 16 } },
          });
        },
      );
      expect(calls).toBe(2);
      expect(r.inventories.VCPU!.total).toBe(16);
      await expectCode(
        retryOnConflict(
          () => store.getInventories(cn.uuid),
          (s) => store.setInventories(cn.uuid, { generation: s.generation + 5, inventories: {} }),
          { attempts: 2 },
        ),
        'reshape.concurrent_update',
      );
    });
  });

  describe('aggregates', () => {
    it('sets aggregates with or without a generation check', async () => {
      const cn = await compute();
      const [x, y] = [randomUUID(), randomUUID()].sort() as [string, string];
      expect(await store.getAggregates(cn.uuid)).toEqual({
        generation: cn.generation,
        aggregates: [],
      });
      const set = await store.setAggregates(cn.uuid, {
        generation: cn.generation,
        aggregates: [y, x.toUpperCase()],
      });
      expect(set).toEqual({ generation: cn.generation + 1, aggregates: [x, y] });
      const e = await expectCode(
        store.setAggregates(cn.uuid, { generation: cn.generation, aggregates: [] }),
        'reshape.concurrent_update',
      );
      expect(e.details).toMatchObject({ entity: 'provider', expected: cn.generation });
      // Without a generation (Placement before 1.19): no check, no bump.
      expect(await store.setAggregates(cn.uuid, { aggregates: [x] })).toEqual({
        generation: cn.generation + 1,
        aggregates: [x],
      });
      await expectCode(
        store.setAggregates(cn.uuid, { aggregates: [x, x] }),
        'reshape.invalid_input',
      );
      await expectCode(
        store.setAggregates(cn.uuid, { aggregates: ['nope'] }),
        'reshape.invalid_input',
      );
      await expectCode(store.getAggregates(randomUUID()), 'reshape.provider_not_found');
      expect((await store.getAggregates(cn.uuid)).aggregates).toEqual([x]);
      await store.deleteProvider(cn.uuid);
    });
  });

  describe('traits', () => {
    it('sets traits with generations; custom traits must exist', async () => {
      const cn = await compute();
      await expectCode(
        store.setTraits(cn.uuid, { generation: cn.generation, traits: ['CUSTOM_FAST'] }),
        'reshape.trait_not_found',
      );
      await store.createTrait('CUSTOM_FAST');
      const r = await store.setTraits(cn.uuid, {
        generation: cn.generation,
        traits: ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'],
      });
      expect(r).toEqual({
        generation: cn.generation + 1,
        traits: ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'],
      });
      await expectCode(
        store.setTraits(cn.uuid, { generation: cn.generation, traits: [] }),
        'reshape.concurrent_update',
      );
      expect(await store.listTraits()).toContain('CUSTOM_FAST');
    });
  });
}

export { expectCode };
