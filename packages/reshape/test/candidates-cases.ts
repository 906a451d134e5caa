/** Allocation-candidate cases every store must pass (memory, SQLite, PostgreSQL, MySQL). */
import { describe, expect, it } from 'vitest';
import { allocationCandidates, type ReshapeStore } from '../src/index.js';

const AGG = '11111111-2222-4333-8444-555555555555';
const OTHER_AGG = '11111111-2222-4333-8444-666666666666';

/** Two compute nodes with two GPUs each, a shared SSD pool in AGG with the first node. */
export async function cloud(store: ReshapeStore) {
  const inv = async (uuid: string, inventories: Record<string, { total: number }>) => {
    const { generation } = await store.getInventories(uuid);
    await store.setInventories(uuid, { generation, inventories });
  };
  const traits = async (uuid: string, list: string[]) => {
    const { generation } = await store.getTraits(uuid);
    await store.setTraits(uuid, { generation, traits: list });
  };
  const nodes = [];
  for (const name of ['cn1', 'cn2']) {
    const cn = await store.createProvider({ name });
    await inv(cn.uuid, { VCPU: { total: 8 }, MEMORY_MB: { total: 4096 } });
    const gpus = [];
    for (const g of ['gpu0', 'gpu1']) {
      const gpu = await store.createProvider({ name: `${name}-${g}`, parentProviderUuid: cn.uuid });
      await inv(gpu.uuid, { VGPU: { total: 2 } });
      gpus.push(gpu.uuid);
    }
    nodes.push({ uuid: cn.uuid, gpus });
  }
  const ss = await store.createProvider({ name: 'ssd-pool' });
  await inv(ss.uuid, { DISK_GB: { total: 2000 } });
  await traits(ss.uuid, ['MISC_SHARES_VIA_AGGREGATE', 'STORAGE_DISK_SSD']);
  await store.setAggregates(ss.uuid, { aggregates: [AGG] });
  await store.setAggregates(nodes[0]!.uuid, { aggregates: [AGG] });
  await traits(nodes[1]!.uuid, ['HW_CPU_X86_AVX']);
  return { cn1: nodes[0]!, cn2: nodes[1]!, ss: ss.uuid };
}

/** The candidate cases, run on a store that `open` creates empty. */
export function candidateCases(kind: string, open: () => Promise<ReshapeStore>): void {
  describe(`allocationCandidates (${kind})`, () => {
    it('takes disk from a sharing provider of the node aggregate', async () => {
      const store = await open();
      const { cn1, ss } = await cloud(store);
      const c = await allocationCandidates(store, {
        resources: { VCPU: 1, DISK_GB: 200 },
        required: [['STORAGE_DISK_SSD']],
      });
      expect(c.allocationRequests).toEqual([
        {
          allocations: { [cn1.uuid]: { VCPU: 1 }, [ss]: { DISK_GB: 200 } },
          mappings: { '': [cn1.uuid, ss].sort() },
        },
      ]);
      // Both trees are summarized: the node's (with its GPUs) and the pool's.
      expect([...c.summaries.keys()].sort()).toEqual([cn1.uuid, ...cn1.gpus, ss].sort());
      expect(c.summaries.get(ss)!.traits).toEqual([
        'MISC_SHARES_VIA_AGGREGATE',
        'STORAGE_DISK_SSD',
      ]);
      // Out of the aggregate, no disk.
      const none = await allocationCandidates(store, {
        resources: { VCPU: 1, DISK_GB: 200 },
        notMemberOf: [AGG],
      });
      expect(none.allocationRequests).toEqual([]);
      await store.close();
    });

    it("lists a summary's standard traits before its custom ones, as Placement creates them", async () => {
      const store = await open();
      const { cn1 } = await cloud(store);
      await store.createTrait('CUSTOM_A_FIRST_BY_NAME');
      const { generation } = await store.getTraits(cn1.uuid);
      await store.setTraits(cn1.uuid, {
        generation,
        traits: ['CUSTOM_A_FIRST_BY_NAME', 'HW_NUMA_ROOT', 'HW_CPU_X86_AVX'],
      });
      const c = await allocationCandidates(store, { resources: { VCPU: 1 } });
      expect(c.summaries.get(cn1.uuid)!.traits).toEqual([
        'HW_CPU_X86_AVX',
        'HW_NUMA_ROOT',
        'CUSTOM_A_FIRST_BY_NAME',
      ]);
      await store.close();
    });

    it('places suffixed groups on distinct GPUs with isolate, anywhere with none', async () => {
      const store = await open();
      const { cn1, cn2, ss } = await cloud(store);
      const query = {
        resources: { VCPU: 2, DISK_GB: 100 },
        groups: { GPU_A: { resources: { VGPU: 1 } }, GPU_B: { resources: { VGPU: 1 } } },
      };
      const isolated = await allocationCandidates(store, { ...query, groupPolicy: 'isolate' });
      expect(isolated.allocationRequests).toHaveLength(2);
      for (const r of isolated.allocationRequests) {
        expect(r.allocations[ss]).toEqual({ DISK_GB: 100 });
        expect(r.allocations[cn1.uuid]).toEqual({ VCPU: 2 });
        expect(r.mappings.GPU_A).not.toEqual(r.mappings.GPU_B);
      }
      const shared = await allocationCandidates(store, { ...query, groupPolicy: 'none' });
      expect(shared.allocationRequests).toHaveLength(4);
      expect(shared.allocationRequests).toContainEqual({
        allocations: {
          [cn1.uuid]: { VCPU: 2 },
          [cn1.gpus[0]!]: { VGPU: 2 },
          [ss]: { DISK_GB: 100 },
        },
        mappings: { '': [cn1.uuid, ss].sort(), GPU_A: [cn1.gpus[0]!], GPU_B: [cn1.gpus[0]!] },
      });
      // Without disk, both nodes; the root filter keeps the AVX one.
      const avx = await allocationCandidates(store, {
        resources: { VCPU: 1 },
        groups: { '1': { resources: { VGPU: 2 } } },
        rootRequired: ['HW_CPU_X86_AVX'],
      });
      expect(avx.allocationRequests.map((r) => r.mappings['1']![0]).sort()).toEqual(
        [...cn2.gpus].sort(),
      );
      expect(
        (
          await allocationCandidates(store, {
            resources: { VCPU: 1 },
            rootForbidden: ['HW_CPU_X86_AVX'],
          })
        ).allocationRequests,
      ).toEqual([{ allocations: { [cn1.uuid]: { VCPU: 1 } }, mappings: { '': [cn1.uuid] } }]);
      await store.close();
    });

    it('keeps same_subtree groups under one of their providers', async () => {
      const store = await open();
      const { cn1, cn2 } = await cloud(store);
      const c = await allocationCandidates(store, {
        groups: {
          gpu: { resources: { VGPU: 1 } },
          node: { resources: { VCPU: 1 } },
          host: { required: [['HW_CPU_X86_AVX']] },
        },
        groupPolicy: 'none',
        sameSubtree: [['gpu', 'host']],
      });
      // The resourceless `host` group only matches cn2, so only cn2's GPUs qualify.
      expect(c.allocationRequests.map((r) => r.mappings.gpu![0]).sort()).toEqual(
        [...cn2.gpus].sort(),
      );
      expect(c.allocationRequests.every((r) => r.mappings.host![0] === cn2.uuid)).toBe(true);
      expect(c.allocationRequests.some((r) => cn1.uuid in r.allocations)).toBe(false);
      await store.close();
    });

    it('honours member_of any-of, required any-of, in_tree, nested and limit', async () => {
      const store = await open();
      const { cn1, cn2, ss } = await cloud(store);
      const inAny = await allocationCandidates(store, {
        resources: { VCPU: 1 },
        memberOf: [[OTHER_AGG, AGG]],
      });
      expect(inAny.allocationRequests.map((r) => Object.keys(r.allocations))).toEqual([[cn1.uuid]]);
      const anyTrait = await allocationCandidates(store, {
        resources: { VCPU: 1 },
        required: [['HW_CPU_X86_AVX', 'CUSTOM_NOPE']],
      });
      expect(anyTrait.allocationRequests.map((r) => Object.keys(r.allocations))).toEqual([
        [cn2.uuid],
      ]);
      const inTree = await allocationCandidates(store, {
        resources: { VCPU: 1, VGPU: 1 },
        inTree: cn2.gpus[1]!,
      });
      expect(inTree.allocationRequests).toHaveLength(2);
      // Before 1.29 one tree gives one provider per candidate; the sharing pool is another tree.
      const flat = await allocationCandidates(store, {
        resources: { VCPU: 1, VGPU: 1 },
        nested: false,
      });
      expect(flat.allocationRequests).toEqual([]);
      const pool = await allocationCandidates(store, {
        resources: { VCPU: 1, DISK_GB: 1 },
        nested: false,
      });
      expect(pool.allocationRequests.map((r) => Object.keys(r.allocations).sort())).toEqual([
        [cn1.uuid, ss].sort(),
      ]);
      expect([...pool.summaries.keys()].sort()).toEqual([cn1.uuid, ss].sort());
      const limited = await allocationCandidates(store, { resources: { VGPU: 1 }, limit: 1 });
      expect(limited.allocationRequests).toHaveLength(1);
      await expect(
        allocationCandidates(store, { groups: { x: { required: [['HW_CPU_X86_AVX']] } } }),
      ).rejects.toMatchObject({ code: 'reshape.invalid_input' });
      await expect(
        allocationCandidates(store, { resources: { VCPU: 1 }, memberOf: [['not-a-uuid']] }),
      ).rejects.toMatchObject({ code: 'reshape.invalid_input' });
      await store.close();
    });
  });
}
