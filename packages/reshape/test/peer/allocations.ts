/** Peer cases: Allocations: writes, reads, deletes. */
import { randomUUID } from 'node:crypto';
import { A, type Step } from './helpers.js';

/** @internal */
export const ALLOCATE: Step[] = [
  [
    'allocate without consumer_generation at 1.28',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => ({ allocations: A(i.root, { VCPU: 1 }), project_id: 'p', user_id: 'u' }),
    '1.28',
  ],
  [
    'allocate, stale consumer generation',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 1 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
  [
    'allocate over max_unit',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => ({
      allocations: A(i.root, { VGPU: 3 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
  [
    'allocate over capacity',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 7 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
  [
    'allocate on class without inventory',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => ({
      allocations: A(i.root, { DISK_GB: 1 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
  [
    'allocate on unknown provider',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    () => ({
      allocations: A(randomUUID(), { VCPU: 1 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
  [
    'allocate (1.0 list format)',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    (i) => ({ allocations: [{ resource_provider: { uuid: i.root }, resources: { VCPU: 1 } }] }),
    '1.0',
  ],
  ['get allocations 1.28', 'GET', (i) => `/allocations/${i.c1}`, undefined, '1.28'],
  ['get allocations 1.0', 'GET', (i) => `/allocations/${i.c1}`, undefined, '1.0'],
  ['get allocations without a consumer', 'GET', () => '/allocations', undefined, '1.28'],
  ['get allocations of nobody', 'GET', () => `/allocations/${randomUUID()}`, undefined, '1.28'],
  [
    'provider allocations',
    'GET',
    (i) => `/resource_providers/${i.root}/allocations`,
    undefined,
    '1.39',
  ],
  ['usages', 'GET', (i) => `/resource_providers/${i.root}/usages`, undefined, '1.39'],
  [
    'remove inventory in use',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({ resource_provider_generation: 3, inventories: { VCPU: { total: 8 } } }),
    '1.39',
  ],
];

/** @internal */
export const AFTER_RESHAPE: Step[] = [
  ['get allocations after reshape', 'GET', (i) => `/allocations/${i.c1}`, undefined, '1.28'],
  [
    'POST /allocations',
    'POST',
    () => '/allocations',
    (i) => ({
      [i.c1]: {
        allocations: A(i.root, { VCPU: 1 }),
        project_id: 'p',
        user_id: 'u',
        consumer_generation: 2,
      },
    }),
    '1.28',
  ],
  ['delete provider in use', 'DELETE', (i) => `/resource_providers/${i.root}`, undefined, '1.39'],
];

/** @internal */
export const DELETE: Step[] = [
  ['allocations of the deleted consumer', 'GET', (i) => `/allocations/${i.c2}`, undefined, '1.28'],
  [
    'empty PUT before 1.28',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    () => ({ allocations: {}, project_id: 'p', user_id: 'u' }),
    '1.27',
  ],
  ['empty POST /allocations', 'POST', () => '/allocations', () => ({}), '1.28'],
  ['delete allocations', 'DELETE', (i) => `/allocations/${i.c1}`, undefined, '1.28'],
  ['delete allocations again', 'DELETE', (i) => `/allocations/${i.c1}`, undefined, '1.28'],
];
