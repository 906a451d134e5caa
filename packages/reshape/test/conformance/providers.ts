import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ReshapeStore } from '../../src/index.js';

import { compute as computeIn, expectCode, P, U } from './helpers.js';

/** @internal */
export function providerCases(suite: { store: ReshapeStore }): void {
  let store: ReshapeStore;
  beforeAll(() => {
    store = suite.store;
  });
  const compute = (cpus?: number, extra?: Record<string, number>) => computeIn(store, cpus, extra);

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

    it('lists providers by aggregates: lists AND-ed, members of a list OR-ed, negation', async () => {
      const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
      const inA = await compute();
      const inAB = await compute();
      const inC = await compute();
      await store.setAggregates(inA.uuid, { aggregates: [a] });
      await store.setAggregates(inAB.uuid, { aggregates: [a, b] });
      await store.setAggregates(inC.uuid, { aggregates: [c] });
      const uuids = async (filter: Parameters<ReshapeStore['listProviders']>[0]) =>
        (await store.listProviders(filter)).map((p) => p.uuid).sort();

      expect(await uuids({ memberOf: [[a]] })).toEqual([inA.uuid, inAB.uuid].sort());
      expect(await uuids({ memberOf: [[b, c.toUpperCase()]] })).toEqual(
        [inAB.uuid, inC.uuid].sort(),
      );
      expect(await uuids({ memberOf: [[a], [b]] })).toEqual([inAB.uuid]);
      expect(await uuids({ memberOf: [[a], [c]] })).toEqual([]);
      expect(await uuids({ memberOf: [[a, c]], notMemberOf: [b] })).toEqual(
        [inA.uuid, inC.uuid].sort(),
      );
      expect(await uuids({ memberOf: [[a]], notMemberOf: [a] })).toEqual([]);
      expect(await uuids({ memberOf: [[randomUUID()]] })).toEqual([]);
      expect(await uuids({ memberOf: [[]] })).toEqual([]);
      const rest = await uuids({ notMemberOf: [a, c] });
      expect(rest).not.toContain(inA.uuid);
      expect(rest).not.toContain(inAB.uuid);
      expect(rest).not.toContain(inC.uuid);
      expect(
        await uuids({ name: (await store.getProvider(inAB.uuid))!.name, memberOf: [[b]] }),
      ).toEqual([inAB.uuid]);
      await expectCode(store.listProviders({ memberOf: [['nope']] }), 'reshape.invalid_input');
      await expectCode(store.listProviders({ notMemberOf: ['nope'] }), 'reshape.invalid_input');
      for (const p of [inA, inAB, inC]) await store.deleteProvider(p.uuid);
    });
  });

  describe('trait and capacity filters', () => {
    it('lists providers by required and forbidden traits and by room for resources', async () => {
      const custom = `CUSTOM_FILTER_${randomUUID().slice(0, 8).toUpperCase()}`;
      await store.createTrait(custom);
      const c1 = await compute(8);
      const c2 = await compute(8, { DISK_GB: 100 });
      const c3 = await compute(4);
      const ours = new Set([c1.uuid, c2.uuid, c3.uuid]);
      await store.setInventories(c2.uuid, {
        generation: c2.generation,
        inventories: { VCPU: { total: 8 }, DISK_GB: { total: 100, stepSize: 10, maxUnit: 50 } },
      });
      for (const [p, traits] of [
        [c1, [custom, 'HW_CPU_X86_SSE2']],
        [c2, ['HW_CPU_X86_SSE2']],
        [c3, ['HW_CPU_X86_SSE3']],
      ] as const) {
        const { generation } = await store.getTraits(p.uuid);
        await store.setTraits(p.uuid, { generation, traits: [...traits] });
      }
      await store.setAllocations(randomUUID(), {
        projectId: P,
        userId: U,
        consumerGeneration: null,
        allocations: { [c1.uuid]: { VCPU: 6 } },
      });
      const uuids = async (filter: Parameters<ReshapeStore['listProviders']>[0]) =>
        (await store.listProviders(filter))
          .map((p) => p.uuid)
          .filter((u) => ours.has(u))
          .sort();
      const sorted = (...list: { uuid: string }[]) => list.map((p) => p.uuid).sort();

      expect(await uuids({ requiredTraits: [[custom]] })).toEqual([c1.uuid]);
      expect(await uuids({ requiredTraits: [['HW_CPU_X86_SSE2']] })).toEqual(sorted(c1, c2));
      expect(await uuids({ requiredTraits: [[custom], ['HW_CPU_X86_SSE2']] })).toEqual([c1.uuid]);
      expect(await uuids({ requiredTraits: [[custom, 'HW_CPU_X86_SSE3']] })).toEqual(
        sorted(c1, c3),
      );
      expect(await uuids({ forbiddenTraits: [custom] })).toEqual(sorted(c2, c3));
      expect(
        await uuids({ requiredTraits: [['HW_CPU_X86_SSE2']], forbiddenTraits: [custom] }),
      ).toEqual([c2.uuid]);

      expect(await uuids({ resources: { VCPU: 2 } })).toEqual(sorted(c1, c2, c3));
      expect(await uuids({ resources: { VCPU: 3 } })).toEqual(sorted(c2, c3));
      expect(await uuids({ resources: { VCPU: 5 } })).toEqual([c2.uuid]);
      expect(await uuids({ resources: { DISK_GB: 20 } })).toEqual([c2.uuid]);
      expect(await uuids({ resources: { DISK_GB: 15 } })).toEqual([]);
      expect(await uuids({ resources: { DISK_GB: 60 } })).toEqual([]);
      expect(await uuids({ resources: { VCPU: 1, DISK_GB: 10 } })).toEqual([c2.uuid]);
      expect(
        await uuids({ resources: { VCPU: 3 }, requiredTraits: [['HW_CPU_X86_SSE2']] }),
      ).toEqual([c2.uuid]);

      const missing = `CUSTOM_MISSING_${randomUUID().slice(0, 8).toUpperCase()}`;
      const e = await expectCode(
        store.listProviders({ requiredTraits: [[missing]], forbiddenTraits: ['CUSTOM_NOPE_X'] }),
        'reshape.trait_not_found',
      );
      expect(e.details).toEqual({ traits: [missing, 'CUSTOM_NOPE_X'] });
      await expectCode(
        store.listProviders({ resources: { CUSTOM_NO_SUCH_CLASS_X: 1 } }),
        'reshape.resource_class_not_found',
      );
      await expectCode(store.listProviders({ resources: { VCPU: 0 } }), 'reshape.invalid_input');
    });
  });
}
