/** Peer cases: `POST /reshaper`. */
import { A, type Ids, type Step } from './helpers.js';

/** A reshape of root's VCPU and child's VGPU, with or without moving c1's allocation onto both. */
const reshape = (rootGeneration: number, vgpu: number, allocate: boolean) => (i: Ids) => ({
  inventories: {
    [i.root]: { resource_provider_generation: rootGeneration, inventories: { VCPU: { total: 8 } } },
    [i.child]: { resource_provider_generation: 0, inventories: { VGPU: { total: vgpu } } },
  },
  allocations: allocate
    ? {
        [i.c1]: {
          allocations: { ...A(i.root, { VCPU: 2 }), ...A(i.child, { VGPU: 2 }) },
          project_id: 'p',
          user_id: 'u',
          consumer_generation: 1,
        },
      }
    : {},
});

/** @internal */
export const RESHAPER: Step[] = [
  [
    'reshaper before 1.30',
    'POST',
    () => '/reshaper',
    () => ({ inventories: {}, allocations: {} }),
    '1.29',
  ],
  ['reshaper, stale generation', 'POST', () => '/reshaper', reshape(1, 4, true), '1.30'],
  ['reshaper, in use', 'POST', () => '/reshaper', reshape(3, 4, false), '1.30'],
  ['reshaper, over capacity', 'POST', () => '/reshaper', reshape(3, 1, true), '1.30'],
  ['reshaper', 'POST', () => '/reshaper', reshape(3, 4, true), '1.30'],
  [
    'usages after reshape',
    'GET',
    (i) => `/resource_providers/${i.child}/usages`,
    undefined,
    '1.39',
  ],
];
