import { randomUUID } from 'node:crypto';
import { RiggingError } from '@rigging/core';
import { beforeAll, describe, expect, it } from 'vitest';
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
} from '../../src/index.js';

import { compute as computeIn, dump, expectCode, P, U, vgpuDriver } from './helpers.js';

/** @internal */
export function reshapeCases(suite: { store: ReshapeStore }): void {
  let store: ReshapeStore;
  beforeAll(() => {
    store = suite.store;
  });
  const compute = (cpus?: number, extra?: Record<string, number>) => computeIn(store, cpus, extra);

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

    it('renames a custom resource class in place, inventories and allocations with it', async () => {
      await store.createResourceClass('CUSTOM_RENAME_A');
      const cn = await store.createProvider({ name: `rename-in-place-${randomUUID()}` });
      await store.setInventories(cn.uuid, {
        generation: 0,
        inventories: { CUSTOM_RENAME_A: { total: 4 }, VCPU: { total: 2 } },
      });
      const consumers = [randomUUID(), randomUUID()];
      for (const c of consumers)
        await store.setAllocations(c, {
          projectId: P,
          userId: U,
          allocations: { [cn.uuid]: { CUSTOM_RENAME_A: 1, VCPU: 1 } },
        });
      const before = await store.getInventories(cn.uuid);

      await store.renameResourceClass('CUSTOM_RENAME_A', 'CUSTOM_RENAME_B');
      const classes = await store.listResourceClasses();
      expect(classes).toContain('CUSTOM_RENAME_B');
      expect(classes).not.toContain('CUSTOM_RENAME_A');
      const after = await store.getInventories(cn.uuid);
      expect(after.generation).toBe(before.generation);
      expect(Object.keys(after.inventories).sort()).toEqual(['CUSTOM_RENAME_B', 'VCPU']);
      expect(after.inventories.CUSTOM_RENAME_B).toEqual(before.inventories.CUSTOM_RENAME_A);
      expect((await store.getUsages(cn.uuid)).usages).toEqual({ CUSTOM_RENAME_B: 2, VCPU: 2 });
      for (const c of consumers) {
        const a = await store.getAllocations(c);
        expect(a?.allocations[cn.uuid]).toEqual({ CUSTOM_RENAME_B: 1, VCPU: 1 });
      }

      await store.createResourceClass('CUSTOM_RENAME_C');
      await expectCode(
        store.renameResourceClass('CUSTOM_RENAME_B', 'CUSTOM_RENAME_C'),
        'reshape.duplicate',
      );
      await expectCode(
        store.renameResourceClass('CUSTOM_RENAME_A', 'CUSTOM_RENAME_D'),
        'reshape.resource_class_not_found',
      );
      await expectCode(
        store.renameResourceClass('VCPU', 'CUSTOM_RENAME_D'),
        'reshape.resource_class_not_found',
      );
      await expectCode(
        store.renameResourceClass('CUSTOM_RENAME_B', 'RENAME_D'),
        'reshape.invalid_input',
      );
      expect((await store.getUsages(cn.uuid)).usages).toEqual({ CUSTOM_RENAME_B: 2, VCPU: 2 });
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
}
