import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ReshapeStore } from '../../src/index.js';

import { compute as computeIn, expectCode, P, U } from './helpers.js';

/** @internal */
export function inventoryCases(suite: { store: ReshapeStore }): void {
  let store: ReshapeStore;
  beforeAll(() => {
    store = suite.store;
  });
  const compute = (cpus?: number, extra?: Record<string, number>) => computeIn(store, cpus, extra);

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
}
