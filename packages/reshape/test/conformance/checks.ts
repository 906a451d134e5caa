import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ReshapeRequest, ReshapeStore } from '../../src/index.js';

import { compute as computeIn, dump, expectCode, P, U } from './helpers.js';

const MAX_INT = 2147483647;

/**
 * What every write checks and how it words a refusal: each problem a dry run gathers with its
 * message and details, the unit and capacity bounds at their edges, and the input checks that
 * run before anything is read.
 * @internal
 */
export function checkCases(suite: { store: ReshapeStore }): void {
  let store: ReshapeStore;
  beforeAll(() => {
    store = suite.store;
  });
  const compute = (cpus?: number, extra?: Record<string, number>) => computeIn(store, cpus, extra);

  describe('checks', () => {
    it('gathers every problem of a write in a dry run, each with its message and details', async () => {
      const rp = await store.createProvider({ name: `checks-${randomUUID()}` });
      await store.setInventories(rp.uuid, {
        generation: 0,
        inventories: {
          VCPU: { total: 8 },
          MEMORY_MB: { total: 2048, minUnit: 512, maxUnit: 1024, stepSize: 256 },
        },
      });
      const held = randomUUID();
      await store.setAllocations(held, {
        projectId: P,
        userId: U,
        allocations: { [rp.uuid]: { VCPU: 2 } },
      });
      const cn = rp.uuid;
      const generation = (await store.getProvider(cn))!.generation;
      const missing = randomUUID();
      const fresh = randomUUID();
      const request: ReshapeRequest = {
        inventories: {
          // A provider that does not exist, given an inventory its allocation below overfills.
          [missing]: { generation: 0, inventories: { VCPU: { total: 1 } } },
          [cn]: {
            generation: generation - 1,
            inventories: {
              VCPU: { total: 8 },
              MEMORY_MB: { total: 2048, minUnit: 512, maxUnit: 1024, stepSize: 256 },
              CUSTOM_CHECKS_NONE: { total: 1 },
            },
          },
        },
        allocations: {
          [held]: {
            projectId: P,
            userId: U,
            consumerGeneration: 5,
            allocations: { [cn]: { VCPU: 2 } },
          },
          [fresh]: {
            projectId: P,
            userId: U,
            consumerGeneration: 3,
            // 256 is a multiple of the step but below min_unit; no DISK_GB inventory here.
            allocations: { [missing]: { VCPU: 2 }, [cn]: { MEMORY_MB: 256, DISK_GB: 1 } },
          },
        },
      };
      const before = await dump(store, [held, fresh], cn);
      const report = await store.checkReshape(request);
      expect(report.ok).toBe(false);
      expect(report.problems).toEqual([
        {
          code: 'reshape.provider_not_found',
          message: `resource provider ${missing} does not exist`,
          details: { entity: 'provider', uuid: missing },
        },
        {
          code: 'reshape.concurrent_update',
          message: `resource provider ${cn} is at generation ${generation}, not ${generation - 1}: it changed since it was read`,
          details: { entity: 'provider', uuid: cn, expected: generation - 1, actual: generation },
        },
        {
          code: 'reshape.resource_class_not_found',
          message: 'resource class CUSTOM_CHECKS_NONE does not exist',
          details: { resourceClass: 'CUSTOM_CHECKS_NONE', uuid: cn },
        },
        {
          code: 'reshape.concurrent_update',
          message: `consumer ${held} is at generation 1, not 5: it changed since it was read`,
          details: { entity: 'consumer', uuid: held, expected: 5, actual: 1 },
        },
        {
          code: 'reshape.concurrent_update',
          message: `consumer ${fresh} does not exist, but generation 3 was expected`,
          details: { entity: 'consumer', uuid: fresh, expected: 3, actual: null },
        },
        {
          code: 'reshape.provider_not_found',
          message: `resource provider ${missing} (allocated to consumer ${fresh}) does not exist`,
          details: { entity: 'provider', uuid: missing, consumer: fresh },
        },
        {
          code: 'reshape.invalid_allocation',
          message: `256 MEMORY_MB for consumer ${fresh} on ${cn} violates min_unit 512, max_unit 1024 or step_size 256`,
          details: {
            uuid: cn,
            resourceClass: 'MEMORY_MB',
            consumer: fresh,
            requested: 256,
            minUnit: 512,
            maxUnit: 1024,
            stepSize: 256,
          },
        },
        {
          code: 'reshape.invalid_allocation',
          message: `resource provider ${cn} has no DISK_GB inventory to allocate to consumer ${fresh}`,
          details: { uuid: cn, resourceClass: 'DISK_GB', consumer: fresh, requested: 1 },
        },
      ]);
      expect(await dump(store, [held, fresh], cn)).toEqual(before);
    });

    it('words capacity and in-use refusals with the amounts: allocated classes first, then removed inventories, then lowered ones', async () => {
      const cn = await compute(4, { MEMORY_MB: 1024, DISK_GB: 100 });
      const a = randomUUID();
      await store.setAllocations(a, {
        projectId: P,
        userId: U,
        allocations: { [cn.uuid]: { VCPU: 4, MEMORY_MB: 512, DISK_GB: 50 } },
      });
      const b = randomUUID();
      const { generation } = await store.getInventories(cn.uuid);
      const request: ReshapeRequest = {
        inventories: {
          // MEMORY_MB removed while in use, DISK_GB lowered below its usage, VCPU below it too.
          [cn.uuid]: { generation, inventories: { DISK_GB: { total: 40 }, VCPU: { total: 2 } } },
        },
        allocations: { [b]: { projectId: P, userId: U, allocations: { [cn.uuid]: { VCPU: 1 } } } },
      };
      const report = await store.checkReshape(request);
      expect(report.problems).toEqual([
        {
          code: 'reshape.capacity_exceeded',
          message: `VCPU on resource provider ${cn.uuid} would be over capacity: 5 used of 2`,
          details: { uuid: cn.uuid, resourceClass: 'VCPU', capacity: 2, used: 5, requested: 1 },
        },
        {
          code: 'reshape.inventory_in_use',
          message: `cannot remove the MEMORY_MB inventory of resource provider ${cn.uuid}: 512 still allocated`,
          details: { uuid: cn.uuid, resourceClass: 'MEMORY_MB', used: 512 },
        },
        {
          code: 'reshape.capacity_exceeded',
          message: `DISK_GB on resource provider ${cn.uuid} would be over capacity: 50 used of 40`,
          details: {
            uuid: cn.uuid,
            resourceClass: 'DISK_GB',
            capacity: 40,
            used: 50,
            requested: 0,
          },
        },
      ]);
      // The write itself throws the first of them and changes nothing.
      const before = await dump(store, [a, b], cn.uuid);
      const e = await expectCode(store.reshape(request), 'reshape.capacity_exceeded');
      expect(e.details).toMatchObject({ resourceClass: 'VCPU', capacity: 2, used: 5 });
      expect(await dump(store, [a, b], cn.uuid)).toEqual(before);
    });

    it('refuses an allocation of a class a provider has no inventory of, and nothing more', async () => {
      const cn = await compute(8);
      const c = randomUUID();
      const { generation } = await store.getInventories(cn.uuid);
      for (const request of [
        {
          allocations: {
            [c]: { projectId: P, userId: U, allocations: { [cn.uuid]: { DISK_GB: 1 } } },
          },
        },
        {
          inventories: { [cn.uuid]: { generation, inventories: { VCPU: { total: 8 } } } },
          allocations: {
            [c]: { projectId: P, userId: U, allocations: { [cn.uuid]: { DISK_GB: 1 } } },
          },
        },
      ] satisfies ReshapeRequest[]) {
        const report = await store.checkReshape(request);
        expect(report.problems.map((p) => [p.code, p.details?.resourceClass])).toEqual([
          ['reshape.invalid_allocation', 'DISK_GB'],
        ]);
      }
      // An unknown class or provider is that problem alone, not also a missing inventory.
      const missing = randomUUID();
      const report = await store.checkReshape({
        allocations: {
          [c]: {
            projectId: P,
            userId: U,
            allocations: { [cn.uuid]: { CUSTOM_CHECKS_NONE: 1 }, [missing]: { VCPU: 1 } },
          },
        },
      });
      expect(report.problems.map((p) => [p.code, p.details?.uuid])).toEqual([
        ['reshape.resource_class_not_found', undefined],
        ['reshape.provider_not_found', missing],
      ]);
    });

    it('allows amounts at min_unit and max_unit, refuses a multiple of the step below min_unit or above max_unit', async () => {
      const rp = await store.createProvider({ name: `unit-edges-${randomUUID()}` });
      await store.setInventories(rp.uuid, {
        generation: 0,
        inventories: { MEMORY_MB: { total: 8192, minUnit: 512, maxUnit: 1024, stepSize: 256 } },
      });
      const allocate = (n: number) =>
        store.setAllocations(randomUUID(), {
          projectId: P,
          userId: U,
          allocations: { [rp.uuid]: { MEMORY_MB: n } },
        });
      for (const n of [256, 1280]) await expectCode(allocate(n), 'reshape.invalid_allocation');
      await allocate(512);
      await allocate(1024);
      expect((await store.getUsages(rp.uuid)).usages).toEqual({ MEMORY_MB: 1536 });
      // The same bounds decide which providers have room.
      const room = async (n: number) =>
        (await store.listProviders({ name: rp.name, resources: { MEMORY_MB: n } })).length;
      expect([await room(256), await room(512), await room(1024), await room(1280)]).toEqual([
        0, 1, 1, 0,
      ]);
    });

    it('leaves a provider given no resources out of the allocations: not allocated, not bumped, need not exist', async () => {
      const cn = await compute(8);
      const other = await compute(8);
      const c = randomUUID();
      await store.setAllocations(c, {
        projectId: P,
        userId: U,
        allocations: { [cn.uuid]: { VCPU: 1 }, [other.uuid]: {}, [randomUUID()]: {} },
      });
      expect((await store.getAllocations(c))!.allocations).toEqual({ [cn.uuid]: { VCPU: 1 } });
      expect((await store.getProvider(other.uuid))!.generation).toBe(other.generation);
      expect((await store.getProvider(cn.uuid))!.generation).toBe(cn.generation + 1);
    });

    it('reports in a dry run only what changes: same inventories and allocations in another order are no change', async () => {
      const cn = await compute(8, { MEMORY_MB: 1024, DISK_GB: 100 });
      const cn2 = await compute(8, { MEMORY_MB: 1024, DISK_GB: 100 });
      const [a, b] = [randomUUID(), randomUUID()];
      await store.setAllocations(a, {
        projectId: P,
        userId: U,
        allocations: {
          [cn.uuid]: { VCPU: 1, MEMORY_MB: 256, DISK_GB: 10 },
          [cn2.uuid]: { VCPU: 1, MEMORY_MB: 256, DISK_GB: 10 },
        },
      });
      await store.setAllocations(b, {
        projectId: P,
        userId: U,
        allocations: { [cn.uuid]: { VCPU: 2 } },
      });
      const { generation } = await store.getInventories(cn.uuid);
      const report = await store.checkReshape({
        inventories: {
          [cn.uuid]: {
            generation,
            inventories: {
              DISK_GB: { total: 100 },
              MEMORY_MB: { total: 1024 },
              VCPU: { total: 8 },
            },
          },
        },
        allocations: {
          [a]: {
            projectId: P,
            userId: U,
            allocations: {
              [cn2.uuid]: { DISK_GB: 10, MEMORY_MB: 256, VCPU: 1 },
              [cn.uuid]: { DISK_GB: 10, MEMORY_MB: 256, VCPU: 1 },
            },
          },
          [b]: { projectId: P, userId: U, allocations: { [cn.uuid]: { VCPU: 3 } } },
        },
      });
      expect(report).toEqual({
        ok: true,
        problems: [],
        inventories: [],
        allocations: [
          { consumer: b, before: { [cn.uuid]: { VCPU: 2 } }, after: { [cn.uuid]: { VCPU: 3 } } },
        ],
        usages: [{ uuid: cn.uuid, resourceClass: 'VCPU', before: 3, after: 4 }],
      });
    });

    it('accepts inventories at the edges of every field', async () => {
      const cn = await compute(8);
      const edges = {
        total: MAX_INT,
        reserved: MAX_INT,
        minUnit: 7,
        maxUnit: 7,
        stepSize: 1,
        allocationRatio: 0.5,
      };
      const r = await store.setInventories(cn.uuid, {
        generation: cn.generation,
        inventories: { VCPU: edges },
      });
      expect(r.inventories.VCPU).toEqual(edges);
    });

    it('refuses malformed input before reading anything, naming the field and the value', async () => {
      const cn = await compute(8);
      const rp = cn.uuid;
      const c = randomUUID();
      const inventory = (VCPU: unknown) => ({
        inventories: { [rp]: { generation: cn.generation, inventories: { VCPU } } },
      });
      const consumer = (fields: Record<string, unknown>) => ({
        allocations: {
          [c]: { projectId: P, userId: U, allocations: { [rp]: { VCPU: 1 } }, ...fields },
        },
      });
      const amount = (n: unknown) => consumer({ allocations: { [rp]: { VCPU: n } } });
      const int = (field: string, min: number, got: string) =>
        `${field} must be an integer from ${min} to ${MAX_INT}, got ${got}`;
      const cases: [unknown, string][] = [
        [null, 'a reshape request must be an object'],
        ['inventories', 'a reshape request must be an object'],
        [{ inventories: { 'not-a-uuid': {} } }, 'provider uuid must be a UUID, got "not-a-uuid"'],
        [{ inventories: { [rp]: null } }, `inventories of ${rp} must be an object`],
        [{ inventories: { [rp]: 'x' } }, `inventories of ${rp} must be an object`],
        [
          { inventories: { [rp]: { generation: -1, inventories: {} } } },
          int(`generation of ${rp}`, 0, '-1'),
        ],
        [inventory(null), 'inventory of VCPU must be an object'],
        [inventory(8), 'inventory of VCPU must be an object'],
        [inventory({ total: 0 }), int('VCPU.total', 1, '0')],
        [inventory({ total: MAX_INT + 1 }), int('VCPU.total', 1, String(MAX_INT + 1))],
        [inventory({ total: 8, reserved: -1 }), int('VCPU.reserved', 0, '-1')],
        [inventory({ total: 8, minUnit: 0 }), int('VCPU.minUnit', 1, '0')],
        [inventory({ total: 8, maxUnit: 0 }), int('VCPU.maxUnit', 1, '0')],
        [inventory({ total: 8, stepSize: 0 }), int('VCPU.stepSize', 1, '0')],
        ...[Number.NaN, Number.POSITIVE_INFINITY, -1, '2'].map((ratio): [unknown, string] => [
          inventory({ total: 8, allocationRatio: ratio }),
          `VCPU.allocationRatio must be a number above 0, got ${String(ratio)}`,
        ]),
        [inventory({ total: 4, reserved: 5 }), 'VCPU: reserved (5) is above total (4)'],
        [inventory({ total: 4, minUnit: 3, maxUnit: 2 }), 'VCPU: minUnit (3) is above maxUnit (2)'],
        [{ allocations: { 'not-a-uuid': {} } }, 'consumer uuid must be a UUID, got "not-a-uuid"'],
        [{ allocations: { [c]: null } }, `allocations of ${c} must be an object`],
        [{ allocations: { [c]: 'x' } }, `allocations of ${c} must be an object`],
        ...['', 'p'.repeat(256), 5].map((projectId): [unknown, string] => [
          consumer({ projectId }),
          `projectId of consumer ${c} must be a non-empty string`,
        ]),
        ...['', 'u'.repeat(256), 5].map((userId): [unknown, string] => [
          consumer({ userId }),
          `userId of consumer ${c} must be a non-empty string`,
        ]),
        [consumer({ consumerGeneration: -1 }), int(`consumerGeneration of ${c}`, 0, '-1')],
        [consumer({ consumerGeneration: 1.5 }), int(`consumerGeneration of ${c}`, 0, '1.5')],
        [consumer({ allocations: null }), `allocations of consumer ${c} must be an object`],
        [consumer({ allocations: 'x' }), `allocations of consumer ${c} must be an object`],
        [
          consumer({ allocations: { 'not-a-uuid': { VCPU: 1 } } }),
          'provider uuid must be a UUID, got "not-a-uuid"',
        ],
        [consumer({ allocations: { [rp]: null } }), 'resources must be an object'],
        [consumer({ allocations: { [rp]: 1 } }), 'resources must be an object'],
        [amount(0), int(`VCPU amount of consumer ${c}`, 1, '0')],
        [amount(1.5), int(`VCPU amount of consumer ${c}`, 1, '1.5')],
        [amount(MAX_INT + 1), int(`VCPU amount of consumer ${c}`, 1, String(MAX_INT + 1))],
        [amount('1'), int(`VCPU amount of consumer ${c}`, 1, '"1"')],
      ];
      const before = await dump(store, [c], rp);
      for (const [request, message] of cases) {
        const e = await expectCode(
          store.reshape(request as ReshapeRequest),
          'reshape.invalid_input',
        );
        expect(e.message).toBe(message);
      }
      expect(await dump(store, [c], rp)).toEqual(before);
      // The field and the amounts are in the details.
      const total = await expectCode(
        store.reshape(inventory({ total: 0 }) as ReshapeRequest),
        'reshape.invalid_input',
      );
      expect(total.details).toEqual({ field: 'VCPU.total' });
      const reserved = await expectCode(
        store.reshape(inventory({ total: 4, reserved: 5 }) as ReshapeRequest),
        'reshape.invalid_input',
      );
      expect(reserved.details).toEqual({ resourceClass: 'VCPU', reserved: 5, total: 4 });
      // Names and amounts at their upper bounds are accepted.
      await store.reshape(
        consumer({ projectId: 'p'.repeat(255), userId: 'u'.repeat(255) }) as ReshapeRequest,
      );
      expect(await store.getAllocations(c)).toMatchObject({
        projectId: 'p'.repeat(255),
        userId: 'u'.repeat(255),
      });
    });
  });
}
