import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { type AllocationsInput, type ReshapeStore } from '../../src/index.js';

import { compute as computeIn, dump, expectCode, P, U } from './helpers.js';

/** @internal */
export function allocationCases(suite: { store: ReshapeStore }): void {
  let store: ReshapeStore;
  beforeAll(() => {
    store = suite.store;
  });
  const compute = (cpus?: number, extra?: Record<string, number>) => computeIn(store, cpus, extra);

  describe('allocations', () => {
    it("lists a consumer's providers in the order of its last write, as Placement does", async () => {
      // Provider uuids that sort against the write order, so that a sort cannot pass for it.
      const uuids = ['ffffffff', 'aaaaaaaa', 'cccccccc', '11111111'].map(
        (head) => `${head}${randomUUID().slice(8)}`,
      );
      for (const uuid of uuids) {
        await store.createProvider({ name: `order-${uuid}`, uuid });
        await store.setInventories(uuid, {
          generation: 0,
          inventories: { VCPU: { total: 8 }, MEMORY_MB: { total: 1024 } },
        });
      }
      const [f, a, c, one] = uuids as [string, string, string, string];
      const consumer = randomUUID();
      const write = async (order: string[], used = 1) => {
        const allocations: AllocationsInput['allocations'] = {};
        for (const rp of order) allocations[rp] = { MEMORY_MB: used, VCPU: used };
        const written = await store.setAllocations(consumer, {
          projectId: P,
          userId: U,
          allocations,
        });
        const read = (await store.getAllocations(consumer))!;
        // What a write returns is what a read then finds, in the same order.
        expect(written).toEqual(read);
        expect(Object.keys(written.allocations)).toEqual(Object.keys(read.allocations));
        return Object.keys(read.allocations);
      };
      expect(await write([f, a, c])).toEqual([f, a, c]);
      // Rewritten in another order, with the same amounts: listed in the new order.
      expect(await write([c, f, a])).toEqual([c, f, a]);
      // A provider added, one dropped, amounts changed on some.
      expect(await write([one, c, a], 2)).toEqual([one, c, a]);
      expect(await write([c, one, a, f], 2)).toEqual([c, one, a, f]);
      // Classes too keep their written order within a provider.
      expect(Object.keys((await store.getAllocations(consumer))!.allocations[c]!)).toEqual([
        'MEMORY_MB',
        'VCPU',
      ]);
      const tree = await store.getAllocationsForProviderTree(f);
      expect(Object.keys(tree[consumer]!.allocations)).toEqual([c, one, a, f]);
    });

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
      // Shrinking one's own allocation within capacity is allowed.
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
}
