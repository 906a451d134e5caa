/** Peer cases: Inventories of a provider. */
import { A, type Step } from './helpers.js';

/** @internal */
export const INVENTORIES: Step[] = [
  [
    'set inventories, stale generation',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({ resource_provider_generation: 0, inventories: {} }),
    '1.39',
  ],
  [
    'set inventories, bad total',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({ resource_provider_generation: 1, inventories: { VCPU: { total: 0 } } }),
    '1.39',
  ],
  [
    'set inventories, unknown class',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({ resource_provider_generation: 1, inventories: { CUSTOM_NOPE: { total: 1 } } }),
    '1.39',
  ],
  [
    'set inventories, extra field',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({ resource_provider_generation: 1, inventories: {}, extra: 1 }),
    '1.39',
  ],
  ['get inventories', 'GET', (i) => `/resource_providers/${i.root}/inventories`, undefined, '1.39'],
  [
    'get one inventory',
    'GET',
    (i) => `/resource_providers/${i.root}/inventories/VGPU`,
    undefined,
    '1.39',
  ],
  [
    'get missing inventory',
    'GET',
    (i) => `/resource_providers/${i.root}/inventories/DISK_GB`,
    undefined,
    '1.39',
  ],
  [
    'allocate (1.28, new consumer)',
    'PUT',
    (i) => `/allocations/${i.c1}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 2, VGPU: 2 }),
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    }),
    '1.28',
  ],
];
