/** Peer cases: Resource providers: create, list, show, rename, re-parent, delete; and protocol errors. */
import { randomUUID } from 'node:crypto';
import type { Step } from './helpers.js';

/** @internal */
export const CREATE_AND_LIST: Step[] = [
  ['version discovery', 'GET', () => '/', undefined, '1.0'],
  [
    'create root (1.20 returns body)',
    'POST',
    () => '/resource_providers',
    (i) => ({ name: `cn-${i.root.slice(0, 8)}`, uuid: i.root }),
    '1.20',
  ],
  [
    'create child (1.14, 201)',
    'POST',
    () => '/resource_providers',
    (i) => ({ name: `gpu-${i.child.slice(0, 8)}`, uuid: i.child, parent_provider_uuid: i.root }),
    '1.14',
  ],
  [
    'duplicate name',
    'POST',
    () => '/resource_providers',
    (i) => ({ name: `cn-${i.root.slice(0, 8)}` }),
    '1.39',
  ],
  [
    'unknown parent',
    'POST',
    () => '/resource_providers',
    () => ({ name: `x-${randomUUID()}`, parent_provider_uuid: randomUUID() }),
    '1.39',
  ],
  [
    'parent before 1.14',
    'POST',
    () => '/resource_providers',
    () => ({ name: `y-${randomUUID()}`, parent_provider_uuid: randomUUID() }),
    '1.13',
  ],
  ['list in_tree', 'GET', (i) => `/resource_providers?in_tree=${i.child}`, undefined, '1.14'],
  [
    'list in_tree before 1.14',
    'GET',
    (i) => `/resource_providers?in_tree=${i.child}`,
    undefined,
    '1.13',
  ],
  ['list bad uuid', 'GET', () => '/resource_providers?uuid=nope', undefined, '1.39'],
  ['show', 'GET', (i) => `/resource_providers/${i.child}`, undefined, '1.39'],
  ['show unknown', 'GET', () => `/resource_providers/${randomUUID()}`, undefined, '1.39'],
];

/** @internal */
export const UPDATE: Step[] = [
  [
    're-parent before 1.37',
    'PUT',
    (i) => `/resource_providers/${i.child}`,
    (i) => ({ name: `gpu0-${i.child.slice(0, 8)}`, parent_provider_uuid: null }),
    '1.36',
  ],
  [
    'set inventories',
    'PUT',
    (i) => `/resource_providers/${i.root}/inventories`,
    () => ({
      resource_provider_generation: 0,
      inventories: { VCPU: { total: 8 }, VGPU: { total: 4, max_unit: 2 } },
    }),
    '1.39',
  ],
];

/** @internal */
export const DELETE_AND_ERRORS: Step[] = [
  ['delete parent', 'DELETE', (i) => `/resource_providers/${i.root}`, undefined, '1.39'],
  ['unsupported version', 'GET', () => '/resource_providers', undefined, '1.99'],
  ['bad version', 'GET', () => '/resource_providers', undefined, 'x.y'],
  ['unknown path', 'GET', () => '/nothing_here', undefined, '1.39'],
  ['wrong method', 'PATCH', () => '/resource_providers', undefined, '1.39'],
  ['malformed JSON', 'POST', () => '/resource_providers', () => '{nope', '1.39'],
  ['delete child', 'DELETE', (i) => `/resource_providers/${i.child}`, undefined, '1.39'],
];
