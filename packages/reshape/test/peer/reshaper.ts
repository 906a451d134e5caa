/** Peer cases: `POST /reshaper`. */
import { A, type Step } from './helpers.js';

/** @internal */
export const RESHAPER: Step[] = [
  [
    'reshaper before 1.30',
    'POST',
    () => '/reshaper',
    () => ({ inventories: {}, allocations: {} }),
    '1.29',
  ],
  [
    'reshaper, stale generation',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: { resource_provider_generation: 1, inventories: { VCPU: { total: 8 } } },
        [i.child]: { resource_provider_generation: 0, inventories: { VGPU: { total: 4 } } },
      },
      allocations: {
        [i.c1]: {
          allocations: { ...A(i.root, { VCPU: 2 }), ...A(i.child, { VGPU: 2 }) },
          project_id: 'p',
          user_id: 'u',
          consumer_generation: 1,
        },
      },
    }),
    '1.30',
  ],
  [
    'reshaper, in use',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: { resource_provider_generation: 3, inventories: { VCPU: { total: 8 } } },
        [i.child]: { resource_provider_generation: 0, inventories: { VGPU: { total: 4 } } },
      },
      allocations: {},
    }),
    '1.30',
  ],
  [
    'reshaper, over capacity',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: { resource_provider_generation: 3, inventories: { VCPU: { total: 8 } } },
        [i.child]: { resource_provider_generation: 0, inventories: { VGPU: { total: 1 } } },
      },
      allocations: {
        [i.c1]: {
          allocations: { ...A(i.root, { VCPU: 2 }), ...A(i.child, { VGPU: 2 }) },
          project_id: 'p',
          user_id: 'u',
          consumer_generation: 1,
        },
      },
    }),
    '1.30',
  ],
  [
    'reshaper',
    'POST',
    () => '/reshaper',
    (i) => ({
      inventories: {
        [i.root]: { resource_provider_generation: 3, inventories: { VCPU: { total: 8 } } },
        [i.child]: { resource_provider_generation: 0, inventories: { VGPU: { total: 4 } } },
      },
      allocations: {
        [i.c1]: {
          allocations: { ...A(i.root, { VCPU: 2 }), ...A(i.child, { VGPU: 2 }) },
          project_id: 'p',
          user_id: 'u',
          consumer_generation: 1,
        },
      },
    }),
    '1.30',
  ],
  [
    'usages after reshape',
    'GET',
    (i) => `/resource_providers/${i.child}/usages`,
    undefined,
    '1.39',
  ],
];
