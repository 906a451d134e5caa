// Scheduling after the VGPU reshape: a compute node whose VGPUs now live on two per-GPU child
// providers, and a disk pool shared with it through an aggregate. A server asking for 2 VCPUs,
// 20 GB of SSD disk and two VGPUs on two different GPUs gets the ways to place it, as Nova asks
// Placement with granular request groups. (In your code: import from '@rigging/reshape'.)
import { allocationCandidates, memoryStore } from '../src/index.js';

const store = memoryStore(); // or: await sqlStore(await openDatabase('sqlite:cloud.db'))
const rack = '4d3e0a6c-7c1f-4f61-9a53-2b8f3f1b9a10'; // an aggregate uuid

const node = await store.createProvider({ name: 'compute-1' });
await store.setInventories(node.uuid, { generation: 0, inventories: { VCPU: { total: 16 } } });
await store.setAggregates(node.uuid, { aggregates: [rack] });
for (const gpu of ['pgpu0', 'pgpu1']) {
  const child = await store.createProvider({
    name: `compute-1_${gpu}`,
    parentProviderUuid: node.uuid,
  });
  await store.setInventories(child.uuid, { generation: 0, inventories: { VGPU: { total: 4 } } });
}

// The pool shares its disk with every tree of its aggregates.
const pool = await store.createProvider({ name: 'ssd-pool' });
await store.setInventories(pool.uuid, { generation: 0, inventories: { DISK_GB: { total: 2000 } } });
await store.setTraits(pool.uuid, {
  generation: 1,
  traits: ['MISC_SHARES_VIA_AGGREGATE', 'STORAGE_DISK_SSD'],
});
await store.setAggregates(pool.uuid, { aggregates: [rack] });

// resources=VCPU:2,DISK_GB:20&required=STORAGE_DISK_SSD
//   &resources_GPU1=VGPU:1&resources_GPU2=VGPU:1&group_policy=isolate
const { allocationRequests, summaries } = await allocationCandidates(store, {
  resources: { VCPU: 2, DISK_GB: 20 },
  required: [['STORAGE_DISK_SSD']],
  groups: { _GPU1: { resources: { VGPU: 1 } }, _GPU2: { resources: { VGPU: 1 } } },
  groupPolicy: 'isolate',
});

const name = (uuid: string) => summaries.get(uuid)!.provider.name;
const lines = allocationRequests.map(({ allocations, mappings }) => {
  const where = Object.entries(allocations).map(
    ([uuid, r]) => `${name(uuid)} ${JSON.stringify(r)}`,
  );
  const gpus = `_GPU1 on ${mappings._GPU1!.map(name).join()}, _GPU2 on ${mappings._GPU2!.map(name).join()}`;
  return `${gpus}: ${where.sort().join(', ')}`;
});
console.log(lines.sort().join('\n'));
// Claim one with store.setAllocations(consumer, { allocations: request.allocations, … }).
