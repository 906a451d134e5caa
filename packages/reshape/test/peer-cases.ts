/**
 * One scripted session of Placement API calls, run against our server and against OpenStack
 * Placement 8.0 to compare status codes, error codes and bodies case by case.
 */
import { randomUUID } from 'node:crypto';

export interface CaseResult {
  name: string;
  status: number;
  code?: string;
  body?: unknown;
  /** The part of a successful body both servers must agree on exactly (see {@link Step}). */
  same?: unknown;
}

export interface Ids {
  root: string;
  child: string;
  /** A provider of its own for aggregates (its generation is not used elsewhere). */
  other: string;
  c1: string;
  c2: string;
  c3: string;
  agg1: string;
  agg2: string;
}

export type Step = [
  name: string,
  method: string,
  path: (i: Ids) => string,
  body: ((i: Ids) => unknown) | undefined,
  version: string,
  /** When given, this part of the body must be equal on both servers (not only its keys). */
  same?: (body: any) => unknown,
];

/** Allocation candidates in a canonical order (Placement's order is its database's). */
function canon(value: unknown): unknown {
  if (Array.isArray(value))
    return value.map(canon).sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => [k, canon(v)]),
  );
}
const AC = (q: string) => `/allocation_candidates?${q}`;

/** The custom trait and resource class a session creates. */
const peerName = (i: Ids): string =>
  `CUSTOM_PEER_${i.root
    .slice(0, 8)
    .toUpperCase()
    .replace(/[^A-Z0-9]/g, '_')}`;

const A = (rp: string, r: Record<string, number>) => ({ [rp]: { resources: r } });

export const STEPS: Step[] = [
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
  [
    'create a provider for aggregates',
    'POST',
    () => '/resource_providers',
    (i) => ({ name: `agg-${i.other.slice(0, 8)}`, uuid: i.other }),
    '1.20',
  ],
  [
    'aggregates before 1.1',
    'GET',
    (i) => `/resource_providers/${i.other}/aggregates`,
    undefined,
    '1.0',
  ],
  [
    'aggregates (1.1, none)',
    'GET',
    (i) => `/resource_providers/${i.other}/aggregates`,
    undefined,
    '1.1',
    (b) => b,
  ],
  [
    'set aggregates (1.1 list, no generation)',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => [i.agg1],
    '1.1',
    (b) => b,
  ],
  [
    'set aggregates (1.19)',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => ({ aggregates: [i.agg1, i.agg2], resource_provider_generation: 0 }),
    '1.19',
    canon,
  ],
  [
    'set aggregates, stale generation',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => ({ aggregates: [i.agg1], resource_provider_generation: 0 }),
    '1.19',
  ],
  [
    'set aggregates without generation at 1.19',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => ({ aggregates: [i.agg1] }),
    '1.19',
  ],
  [
    'set aggregates, list at 1.19',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => [i.agg1],
    '1.19',
  ],
  [
    'set aggregates, duplicates',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    (i) => ({ aggregates: [i.agg1, i.agg1], resource_provider_generation: 1 }),
    '1.19',
  ],
  [
    'set aggregates, not a uuid',
    'PUT',
    (i) => `/resource_providers/${i.other}/aggregates`,
    () => ({ aggregates: ['nope'], resource_provider_generation: 1 }),
    '1.19',
  ],
  [
    'aggregates (1.19, with generation)',
    'GET',
    (i) => `/resource_providers/${i.other}/aggregates`,
    undefined,
    '1.19',
    canon,
  ],
  [
    'standard trait on the aggregates provider',
    'PUT',
    (i) => `/resource_providers/${i.other}/traits`,
    () => ({ traits: ['HW_CPU_X86_AVX2'], resource_provider_generation: 1 }),
    '1.6',
    canon,
  ],
  [
    'disk on the aggregates provider',
    'PUT',
    (i) => `/resource_providers/${i.other}/inventories`,
    () => ({ resource_provider_generation: 2, inventories: { DISK_GB: { total: 10 } } }),
    '1.39',
    canon,
  ],
  [
    'candidates, required trait',
    'GET',
    () => AC('resources=DISK_GB:1&required=HW_CPU_X86_AVX2'),
    undefined,
    '1.17',
    canon,
  ],
  [
    'candidates, required trait missing',
    'GET',
    () => AC('resources=DISK_GB:1&required=HW_CPU_X86_SSE'),
    undefined,
    '1.17',
    canon,
  ],
  [
    'candidates, forbidden trait present',
    'GET',
    () => AC('resources=DISK_GB:1&required=!HW_CPU_X86_AVX2'),
    undefined,
    '1.22',
    canon,
  ],
  [
    'candidates, any-of traits',
    'GET',
    () => AC('resources=DISK_GB:1&required=in:HW_CPU_X86_SSE,HW_CPU_X86_AVX2'),
    undefined,
    '1.39',
    canon,
  ],
  [
    'candidates, any-of traits before 1.39',
    'GET',
    () => AC('resources=DISK_GB:1&required=in:HW_CPU_X86_SSE,HW_CPU_X86_AVX2'),
    undefined,
    '1.38',
  ],
  [
    'candidates, step size and max unit',
    'GET',
    () => AC('resources=DISK_GB:11'),
    undefined,
    '1.39',
    canon,
  ],
  [
    'aggregates of an unknown provider',
    'GET',
    () => `/resource_providers/${randomUUID()}/aggregates`,
    undefined,
    '1.19',
  ],
  [
    'delete the aggregates provider',
    'DELETE',
    (i) => `/resource_providers/${i.other}`,
    undefined,
    '1.39',
  ],
  [
    'rename',
    'PUT',
    (i) => `/resource_providers/${i.child}`,
    (i) => ({ name: `gpu0-${i.child.slice(0, 8)}`, parent_provider_uuid: i.root }),
    '1.39',
  ],
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
  ['candidates before 1.10', 'GET', () => AC('resources=VCPU:1'), undefined, '1.9'],
  ['candidates (1.10, list format)', 'GET', () => AC('resources=VCPU:1'), undefined, '1.10', canon],
  ['candidates (1.12)', 'GET', () => AC('resources=VCPU:1'), undefined, '1.12', canon],
  [
    'candidates (1.26, requested classes)',
    'GET',
    () => AC('resources=VCPU:1'),
    undefined,
    '1.26',
    canon,
  ],
  [
    'candidates across a tree (1.28: not nested-aware)',
    'GET',
    () => AC('resources=VCPU:1,VGPU:1'),
    undefined,
    '1.28',
    canon,
  ],
  [
    'candidates across a tree (1.29)',
    'GET',
    () => AC('resources=VCPU:1,VGPU:1'),
    undefined,
    '1.29',
    canon,
  ],
  [
    'candidates with mappings (1.34)',
    'GET',
    () => AC('resources=VCPU:1,VGPU:2'),
    undefined,
    '1.34',
    canon,
  ],
  ['candidates over capacity', 'GET', () => AC('resources=VGPU:3'), undefined, '1.39', canon],
  ['candidates, limit', 'GET', () => AC('resources=VCPU:1&limit=1'), undefined, '1.16', canon],
  ['candidates, bad limit', 'GET', () => AC('resources=VCPU:1&limit=0'), undefined, '1.16'],
  ['candidates, limit before 1.16', 'GET', () => AC('resources=VCPU:1&limit=1'), undefined, '1.15'],
  [
    'candidates, in_tree',
    'GET',
    (i) => AC(`resources=VCPU:1&in_tree=${i.child}`),
    undefined,
    '1.31',
    canon,
  ],
  [
    'candidates, in_tree unknown',
    'GET',
    () => AC(`resources=VCPU:1&in_tree=${randomUUID()}`),
    undefined,
    '1.31',
    canon,
  ],
  [
    'candidates, in_tree before 1.31',
    'GET',
    (i) => AC(`resources=VCPU:1&in_tree=${i.child}`),
    undefined,
    '1.30',
  ],
  [
    'candidates, forbidden trait nobody has',
    'GET',
    () => AC('resources=VCPU:1&required=!HW_CPU_X86_AVX'),
    undefined,
    '1.22',
    canon,
  ],
  ['candidates without resources', 'GET', () => AC('limit=1'), undefined, '1.16'],
  ['candidates without resources (1.25)', 'GET', () => AC('limit=1'), undefined, '1.25'],
  ['candidates, badly formed', 'GET', () => AC('resources=VCPU'), undefined, '1.39'],
  ['candidates, zero amount', 'GET', () => AC('resources=VCPU:0'), undefined, '1.39'],
  ['candidates, unknown class', 'GET', () => AC('resources=CUSTOM_NOPE:1'), undefined, '1.39'],
  [
    'candidates, unknown custom trait',
    'GET',
    () => AC('resources=VCPU:1&required=CUSTOM_UNKNOWN_X'),
    undefined,
    '1.39',
  ],
  ['candidates, unknown parameter', 'GET', () => AC('resources=VCPU:1&x=1'), undefined, '1.39'],
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
  ['create custom class', 'PUT', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
  ['create custom class again', 'PUT', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
  ['create bad class', 'PUT', () => '/resource_classes/GPU', undefined, '1.7'],
  ['delete standard class', 'DELETE', () => '/resource_classes/VCPU', undefined, '1.7'],
  ['show class', 'GET', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
  ['create trait', 'PUT', (i) => `/traits/${peerName(i)}`, undefined, '1.6'],
  [
    'set unknown trait',
    'PUT',
    (i) => `/resource_providers/${i.child}/traits`,
    () => ({ traits: ['CUSTOM_UNKNOWN_X'], resource_provider_generation: 1 }),
    '1.6',
  ],
  [
    'set traits',
    'PUT',
    (i) => `/resource_providers/${i.child}/traits`,
    (i) => ({
      traits: [peerName(i)],
      resource_provider_generation: 1,
    }),
    '1.6',
  ],
  [
    'allocate at 1.38 without consumer_type',
    'PUT',
    (i) => `/allocations/${i.c3}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 1 }),
      project_id: 'p',
      user_id: 'u2',
      consumer_generation: null,
    }),
    '1.38',
  ],
  [
    'allocate with a bad consumer_type',
    'PUT',
    (i) => `/allocations/${i.c3}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 1 }),
      project_id: 'p',
      user_id: 'u2',
      consumer_generation: null,
      consumer_type: 'instance',
    }),
    '1.38',
  ],
  [
    'allocate with consumer_type (1.38)',
    'PUT',
    (i) => `/allocations/${i.c3}`,
    (i) => ({
      allocations: A(i.root, { VCPU: 1 }),
      project_id: 'p',
      user_id: 'u2',
      consumer_generation: null,
      consumer_type: 'INSTANCE',
    }),
    '1.38',
  ],
  [
    'consumer_type read back',
    'GET',
    (i) => `/allocations/${i.c3}`,
    undefined,
    '1.38',
    (b) => [b.consumer_type, b.project_id, b.user_id, b.consumer_generation],
  ],
  [
    'consumer without a type at 1.38',
    'GET',
    (i) => `/allocations/${i.c1}`,
    undefined,
    '1.38',
    (b) => [b.consumer_type, b.consumer_generation],
  ],
  ['usages before 1.9', 'GET', () => '/usages?project_id=p', undefined, '1.8'],
  ['usages without project_id', 'GET', () => '/usages', undefined, '1.9'],
  ['usages, unknown parameter', 'GET', () => '/usages?project_id=p&x=1', undefined, '1.9'],
  [
    'usages, consumer_type before 1.38',
    'GET',
    () => '/usages?project_id=p&consumer_type=all',
    undefined,
    '1.37',
  ],
  ['usages of a project (1.9)', 'GET', () => '/usages?project_id=p', undefined, '1.9', (b) => b],
  [
    'usages of a user (1.9)',
    'GET',
    () => '/usages?project_id=p&user_id=u2',
    undefined,
    '1.9',
    (b) => b,
  ],
  ['usages of nobody', 'GET', () => '/usages?project_id=nobody', undefined, '1.9', (b) => b],
  [
    'usages per consumer type (1.38)',
    'GET',
    () => '/usages?project_id=p',
    undefined,
    '1.38',
    (b) => b,
  ],
  [
    'usages, consumer_type=all',
    'GET',
    () => '/usages?project_id=p&consumer_type=all',
    undefined,
    '1.38',
    (b) => b,
  ],
  [
    'usages, consumer_type=unknown',
    'GET',
    () => '/usages?project_id=p&consumer_type=unknown',
    undefined,
    '1.38',
    (b) => b,
  ],
  [
    'usages, consumer_type=INSTANCE',
    'GET',
    () => '/usages?project_id=p&user_id=u2&consumer_type=INSTANCE',
    undefined,
    '1.38',
    (b) => b,
  ],
  [
    'usages, bad consumer_type',
    'GET',
    () => '/usages?project_id=p&consumer_type=bad-type',
    undefined,
    '1.38',
  ],
  ['delete the typed consumer', 'DELETE', (i) => `/allocations/${i.c3}`, undefined, '1.38'],
  [
    'candidates, required trait on the child',
    'GET',
    (i) => AC(`resources=VCPU:1,VGPU:1&required=${peerName(i)}`),
    undefined,
    '1.39',
    canon,
  ],
  [
    'candidates, required trait not on the root',
    'GET',
    (i) => AC(`resources=VCPU:1&required=${peerName(i)}`),
    undefined,
    '1.39',
    canon,
  ],
  [
    'candidates, forbidden trait on the child',
    'GET',
    (i) => AC(`resources=VCPU:1,VGPU:1&required=!${peerName(i)}`),
    undefined,
    '1.39',
    canon,
  ],
  [
    'candidates, any-of traits (1.39)',
    'GET',
    (i) => AC(`resources=VGPU:1&required=in:HW_CPU_X86_AVX,${peerName(i)}`),
    undefined,
    '1.39',
    canon,
  ],
  [
    'empty allocations delete the consumer (1.28)',
    'PUT',
    (i) => `/allocations/${i.c2}`,
    () => ({ allocations: {}, project_id: 'p', user_id: 'u', consumer_generation: 1 }),
    '1.28',
  ],
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
  ['delete parent', 'DELETE', (i) => `/resource_providers/${i.root}`, undefined, '1.39'],
  ['unsupported version', 'GET', () => '/resource_providers', undefined, '1.99'],
  ['bad version', 'GET', () => '/resource_providers', undefined, 'x.y'],
  ['unknown path', 'GET', () => '/nothing_here', undefined, '1.39'],
  ['wrong method', 'PATCH', () => '/resource_providers', undefined, '1.39'],
  ['malformed JSON', 'POST', () => '/resource_providers', () => '{nope', '1.39'],
  ['delete child', 'DELETE', (i) => `/resource_providers/${i.child}`, undefined, '1.39'],
];

/** Replaces the session's random uuids by their names, so two sessions compare equal. */
function anonymize(value: unknown, ids: Ids): unknown {
  let text = JSON.stringify(value);
  for (const [name, id] of Object.entries(ids)) text = text.replaceAll(id, `<${name}>`);
  return JSON.parse(text) as unknown;
}

/** Runs every step against `base` with fresh uuids; returns one result per step. */
export async function runSession(
  base: string,
  token = 'admin',
  steps: readonly Step[] = STEPS,
): Promise<CaseResult[]> {
  const ids: Ids = {
    root: randomUUID(),
    child: randomUUID(),
    other: randomUUID(),
    c1: randomUUID(),
    c2: randomUUID(),
    c3: randomUUID(),
    agg1: randomUUID(),
    agg2: randomUUID(),
  };
  const out: CaseResult[] = [];
  for (const [name, method, path, body, version, same] of steps) {
    const b = body?.(ids);
    const res = await fetch(base + path(ids), {
      method,
      headers: {
        'x-auth-token': token,
        'openstack-api-version': `placement ${version}`,
        accept: 'application/json',
        ...(b === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: b === undefined ? undefined : typeof b === 'string' ? b : JSON.stringify(b),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    const code = (parsed as { errors?: { code?: string }[] } | undefined)?.errors?.[0]?.code;
    out.push({
      name,
      status: res.status,
      ...(code ? { code } : {}),
      body: parsed,
      ...(same && res.status < 300 ? { same: same(anonymize(parsed, ids)) } : {}),
    });
  }
  return out;
}
