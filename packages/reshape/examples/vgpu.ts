// The VGPU reshape of "Handling Reshaped Provider Trees": a compute node that reported all its
// VGPUs on the root provider learns, at startup, that they belong to two physical GPUs. The
// driver moves the inventory to one child provider per GPU and moves every instance's VGPU
// allocation with it, in one atomic reshape. (In your code: import from '@rigging/reshape'.)
import { randomUUID } from 'node:crypto';
import {
  ReshapeNeeded,
  allocationCandidates,
  memoryStore,
  updateProviderTree,
  type ProviderTreeDriver,
} from '../src/index.js';

const store = memoryStore(); // or: await sqlStore(await openDatabase('sqlite:cloud.db'))

// Yesterday's tree: one root with 8 VGPUs, 5 instances holding one each.
const node = await store.createProvider({ name: 'compute-1' });
await store.setInventories(node.uuid, {
  generation: 0,
  inventories: {
    VCPU: { total: 32, allocationRatio: 4 },
    MEMORY_MB: { total: 65536 },
    VGPU: { total: 8 },
  },
});
for (let i = 0; i < 5; i++) {
  await store.setAllocations(randomUUID(), {
    projectId: 'demo',
    userId: 'alice',
    consumerGeneration: null,
    allocations: { [node.uuid]: { VCPU: 2, MEMORY_MB: 2048, VGPU: 1 } },
  });
}

// Today's driver: two physical GPUs with 4 VGPUs each.
const driver: ProviderTreeDriver = {
  updateProviderTree(tree, allocations) {
    const root = tree.data(node.uuid);
    for (const gpu of ['pgpu0', 'pgpu1']) {
      const name = `${root.name}_${gpu}`;
      if (!tree.exists(name)) tree.newChild(name, root.uuid);
      tree.updateInventory(name, { VGPU: { total: 4 } });
    }
    const { VGPU: _moved, ...rest } = root.inventories;
    tree.updateInventory(root.uuid, rest);
    if (!root.inventories.VGPU) return; // already reshaped
    if (!allocations) throw new ReshapeNeeded('VGPU inventory moves to per-GPU providers');
    // Move each instance's VGPU to a GPU with room, in place.
    const gpus = tree.children(root.uuid).map((c) => ({ uuid: c.uuid, free: 4 }));
    for (const consumer of Object.values(allocations)) {
      const here = consumer.allocations[root.uuid];
      const vgpus = here?.VGPU;
      if (!here || !vgpus) continue;
      delete here.VGPU;
      const gpu = gpus.find((g) => g.free >= vgpus)!;
      gpu.free -= vgpus;
      consumer.allocations[gpu.uuid] = { VGPU: vgpus };
    }
  },
};

// Outside startup a reshape is fatal...
await updateProviderTree(store, driver, { rootUuid: node.uuid }).catch((error: Error) =>
  console.log(`periodic update refused: ${error.name}`),
);
// ...at startup the flow gathers the allocations, calls the driver again and reshapes.
const result = await updateProviderTree(store, driver, { rootUuid: node.uuid, startup: true });
console.log(`reshaped: ${result.reshaped}, moved ${result.movedConsumers.length} consumers`);
const tree = await store.listProviders({ inTree: node.uuid });
for (const p of tree) {
  const { usages } = await store.getUsages(p.uuid);
  console.log(`${p.name}: ${JSON.stringify(usages)}`);
}

// Scheduling now sees the GPUs: a server asking for one VGPU in a request group of its own is
// placed on the GPU with room (pgpu0 is full), as Nova asks Placement after the reshape.
const { allocationRequests } = await allocationCandidates(store, {
  resources: { VCPU: 2, MEMORY_MB: 2048 },
  groups: { _GPU: { resources: { VGPU: 1 } } },
});
for (const { mappings } of allocationRequests) {
  const gpu = mappings._GPU!.map((uuid) => tree.find((p) => p.uuid === uuid)!.name);
  console.log(`a 1-VGPU server: VGPU from ${gpu.join()}`);
}
