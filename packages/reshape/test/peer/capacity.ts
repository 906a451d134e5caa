/**
 * Capacity on every write: where Placement refuses (409) and where it only warns, as a session of
 * its own (fresh providers and consumers), run against our server and Placement.
 */
import type { Ids, Step } from './helpers.js';

const A = (rp: string, r: Record<string, number>) => ({ [rp]: { resources: r } });
const consumer = (allocations: object, generation: number | null) => ({
  allocations,
  project_id: 'p',
  user_id: 'u',
  consumer_generation: generation,
});
const inventories = (generation: number, inv: Record<string, object>) => ({
  resource_provider_generation: generation,
  inventories: inv,
});
const usages = (b: { usages: unknown }) => b.usages;

/**
 * Steps where we deliberately differ from Placement, with the reason. A reshape must leave every
 * inventory it sets holding its usage; Placement checks only the classes the reshape writes
 * allocations to, and lets the others end over-committed with a warning in its log.
 */
export const CAPACITY_DIFFERENCES: Record<string, string> = {
  'reshaper over-committing an inventory no written allocation uses':
    'a reshape must leave every inventory it sets holding its usage',
};

export const CAPACITY_STEPS: Step[] = [
  [
    'capacity: create provider',
    'POST',
    () => '/resource_providers',
    (i: Ids) => ({ name: `cap-${i.root.slice(0, 8)}`, uuid: i.root }),
    '1.20',
  ],
  [
    'capacity: create second provider',
    'POST',
    () => '/resource_providers',
    (i: Ids) => ({ name: `cap-${i.other.slice(0, 8)}`, uuid: i.other }),
    '1.20',
  ],
  [
    'capacity: VCPU 64, MEMORY_MB 4096',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => inventories(0, { VCPU: { total: 64 }, MEMORY_MB: { total: 4096 } }),
    '1.39',
  ],
  [
    'capacity: second provider VCPU 16',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => inventories(0, { VCPU: { total: 16 } }),
    '1.39',
  ],
  [
    'capacity: allocate c1 VCPU 8, MEMORY_MB 1024',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => consumer(A(i.root, { VCPU: 8, MEMORY_MB: 1024 }), null),
    '1.28',
  ],
  [
    'capacity: allocate c2 VCPU 8',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => consumer(A(i.root, { VCPU: 8 }), null),
    '1.28',
  ],
  [
    'reshaper lowering VCPU 64 to 1 below the allocations it keeps',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: inventories(3, { VCPU: { total: 1 }, MEMORY_MB: { total: 4096 } }),
      },
      allocations: { [i.c1]: consumer(A(i.root, { VCPU: 8, MEMORY_MB: 1024 }), 1) },
    }),
    '1.30',
  ],
  [
    'reshaper shrinking the allocation it writes, still over capacity',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: inventories(3, { VCPU: { total: 1 }, MEMORY_MB: { total: 4096 } }),
      },
      allocations: { [i.c1]: consumer(A(i.root, { VCPU: 1, MEMORY_MB: 1024 }), 1) },
    }),
    '1.30',
  ],
  [
    'capacity: inventories unchanged after the refused reshapes',
    'GET',
    (i) => `/resource_providers/${i.root}/inventories`,
    undefined,
    '1.39',
    (b: { inventories: unknown }) => b.inventories,
  ],
  [
    'capacity: usages unchanged after the refused reshapes',
    'GET',
    (i) => `/resource_providers/${i.root}/usages`,
    undefined,
    '1.39',
    usages,
  ],
  [
    'inventory update below usage only warns',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => inventories(3, { VCPU: { total: 10 }, MEMORY_MB: { total: 4096 } }),
    '1.39',
    (b: { inventories: unknown }) => b.inventories,
  ],
  [
    'single inventory update below usage only warns',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories/VCPU`,
    () => ({ resource_provider_generation: 4, total: 4 }),
    '1.39',
    (b: { total: number }) => b.total,
  ],
  [
    'capacity: usages above capacity are kept',
    'GET',
    (i) => `/resource_providers/${i.root}/usages`,
    undefined,
    '1.39',
    usages,
  ],
  [
    'rewriting an unchanged allocation on an over-committed inventory',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => consumer(A(i.root, { VCPU: 8, MEMORY_MB: 1024 }), 1),
    '1.28',
  ],
  [
    'shrinking an allocation that still does not fit',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => consumer(A(i.root, { VCPU: 2, MEMORY_MB: 1024 }), 1),
    '1.28',
  ],
  [
    'changing another class while keeping the over-committed one',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => consumer(A(i.root, { VCPU: 8, MEMORY_MB: 2048 }), 1),
    '1.28',
  ],
  [
    'POST /allocations keeping an unchanged allocation on an over-committed inventory',
    'POST',
    () => '/allocations',
    (i) => ({ [i.c2]: consumer(A(i.root, { VCPU: 8 }), 1) }),
    '1.28',
  ],
  [
    'capacity: nothing changed after the refused allocations',
    'GET',
    (i) => `/resource_providers/${i.root}/usages`,
    undefined,
    '1.39',
    usages,
  ],
  [
    'dropping the over-committed class from an allocation',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => consumer(A(i.root, { MEMORY_MB: 1024 }), 1),
    '1.28',
  ],
  [
    'POST /allocations moving an allocation to a provider with room',
    'POST',
    () => '/allocations',
    (i) => ({ [i.c2]: consumer(A(i.other, { VCPU: 8 }), 1) }),
    '1.28',
  ],
  [
    'capacity: usages after the moves',
    'GET',
    (i) => `/resource_providers/${i.root}/usages`,
    undefined,
    '1.39',
    usages,
  ],
  [
    'capacity: reserved and allocation ratio (capacity (10 - 2) x 2 = 16)',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => inventories(2, { VCPU: { total: 10, reserved: 2, allocation_ratio: 2 } }),
    '1.39',
  ],
  [
    'allocating up to capacity exactly',
    'PUT',
    (i) => `/allocations/${i.c3}`,
    (i) => consumer(A(i.other, { VCPU: 8 }), null),
    '1.28',
  ],
  [
    'allocating one past capacity',
    'PUT',
    (i) => `/allocations/${i.c3}`,
    (i) => consumer(A(i.other, { VCPU: 9 }), 1),
    '1.28',
  ],
  [
    'inventory with reserved equal to total before 1.26',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => inventories(4, { VCPU: { total: 16, reserved: 16 } }),
    '1.25',
  ],
  [
    'one inventory with reserved equal to total before 1.26',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories/VCPU`,
    () => ({ resource_provider_generation: 4, total: 16, reserved: 16 }),
    '1.25',
  ],
  [
    'POST an inventory with reserved equal to total before 1.26',
    'POST',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => ({ resource_class: 'DISK_GB', total: 16, reserved: 16 }),
    '1.25',
  ],
  [
    'PUT one inventory of a class the provider has none of',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories/DISK_GB`,
    () => ({ resource_provider_generation: 4, total: 10 }),
    '1.39',
  ],
  [
    'reshaper over-committing an inventory no written allocation uses',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: { [i.other]: inventories(4, { VCPU: { total: 4 } }) },
      allocations: { [i.c1]: consumer(A(i.root, { MEMORY_MB: 512 }), 2) },
    }),
    '1.30',
  ],
  [
    'POST an inventory without a generation',
    'POST',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => ({ resource_class: 'DISK_GB', total: 10 }),
    '1.39',
  ],
  [
    'POST an inventory with a stale generation (not checked)',
    'POST',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => ({ resource_class: 'MEMORY_MB', total: 10, resource_provider_generation: 0 }),
    '1.39',
  ],
  [
    'fractional ratio: create provider',
    'POST',
    () => '/resource_providers',
    (i: Ids) => ({ name: `cap-${i.child.slice(0, 8)}`, uuid: i.child }),
    '1.20',
  ],
  [
    'fractional ratio: DISK_GB 100 × 0.29, MEMORY_MB 100 × 0.57, VCPU 10 × 0.7',
    'PUT',
    (i) => `/resource_providers/${i.child}/inventories`,
    () =>
      inventories(0, {
        DISK_GB: { total: 100, allocation_ratio: 0.29 },
        MEMORY_MB: { total: 100, allocation_ratio: 0.57 },
        VCPU: { total: 10, allocation_ratio: 0.7 },
      }),
    '1.39',
  ],
  [
    'fractional ratio: allocating (total − reserved) × ratio exactly, 29 DISK_GB',
    'PUT',
    (i) => `/allocations/${i.agg1}`,
    (i) => consumer(A(i.child, { DISK_GB: 29 }), null),
    '1.28',
  ],
  [
    'fractional ratio: allocating 57 MEMORY_MB of 100 × 0.57',
    'PUT',
    (i) => `/allocations/${i.agg2}`,
    (i) => consumer(A(i.child, { MEMORY_MB: 57 }), null),
    '1.28',
  ],
  [
    'fractional ratio: allocating what fits, 28 DISK_GB, 56 MEMORY_MB and 7 VCPU (10 × 0.7 is 7.000…1)',
    'PUT',
    (i) => `/allocations/${i.agg1}`,
    (i) => consumer(A(i.child, { DISK_GB: 28, MEMORY_MB: 56, VCPU: 7 }), null),
    '1.28',
  ],
  [
    'fractional ratio: usages',
    'GET',
    (i) => `/resource_providers/${i.child}/usages`,
    undefined,
    '1.9',
    (b: { usages: Record<string, number> }) => Object.entries(b.usages).sort(),
  ],
];
