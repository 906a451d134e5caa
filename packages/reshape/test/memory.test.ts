import { describe, expect, it } from 'vitest';
import { allocationCandidates, memoryStore, retryOnConflict } from '../src/index.js';
import { createPlacementHandler } from '../src/http/index.js';
import { conformance } from './conformance/index.js';

describe('memoryStore', () => {
  conformance(async (options) => memoryStore(options));
});

describe('offlineReshape', () => {
  it('runs the flow with reshapes allowed', async () => {
    const { offlineReshape, ReshapeNeeded } = await import('../src/index.js');
    const { randomUUID } = await import('node:crypto');
    const store = memoryStore();
    const root = await store.createProvider({ name: 'host' });
    await store.setInventories(root.uuid, { generation: 0, inventories: { VGPU: { total: 2 } } });
    const c = randomUUID();
    await store.setAllocations(c, {
      projectId: 'p',
      userId: 'u',
      allocations: { [root.uuid]: { VGPU: 2 } },
    });
    const result = await offlineReshape(
      store,
      {
        updateProviderTree(tree, allocations) {
          if (!tree.exists('gpu')) tree.newChild('gpu', root.uuid);
          tree.updateInventory('gpu', { VGPU: { total: 2 } });
          tree.updateInventory(root.uuid, {});
          if (!allocations) throw new ReshapeNeeded();
          allocations[c]!.allocations = { [tree.data('gpu').uuid]: { VGPU: 2 } };
        },
      },
      { rootUuid: root.uuid },
    );
    expect(result.reshaped).toBe(true);
    expect((await store.getUsages(result.tree.data('gpu').uuid)).usages).toEqual({ VGPU: 2 });
  });
});

describe('options', () => {
  it('refuses bad options with a TypeError naming them, before doing anything', async () => {
    const store = memoryStore();
    let calls = 0;
    const refetch = async () => {
      calls++;
      return 0;
    };
    await expect(retryOnConflict(refetch, async () => 1, { attempts: 0 })).rejects.toThrow(
      /attempts/,
    );
    expect(calls).toBe(0);
    await expect(
      allocationCandidates(store, { resources: { VCPU: 1 }, limit: 1.5 }),
    ).rejects.toThrow(TypeError);
    expect(() => createPlacementHandler(store, { maxBodyBytes: -1 })).toThrow(/maxBodyBytes/);
  });
});
