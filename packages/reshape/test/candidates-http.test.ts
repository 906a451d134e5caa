import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { cloud } from './candidates-cases.js';

const store = memoryStore();
const server = createPlacementServer(store);
let base = '';
let world: Awaited<ReturnType<typeof cloud>>;
beforeAll(async () => {
  world = await cloud(store);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/allocation_candidates`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const get = async (q: string, v = '1.39') => {
  const res = await fetch(`${base}?${q}`, {
    headers: { 'openstack-api-version': `placement ${v}` },
  });
  return { status: res.status, body: (await res.json()) as any };
};

it('answers shared disk from the pool of the node aggregate', async () => {
  const { status, body } = await get('resources=VCPU:1,DISK_GB:200&required=STORAGE_DISK_SSD');
  expect(status).toBe(200);
  expect(body.allocation_requests).toEqual([
    {
      allocations: {
        [world.cn1.uuid]: { resources: { VCPU: 1 } },
        [world.ss]: { resources: { DISK_GB: 200 } },
      },
      mappings: { '': [world.cn1.uuid, world.ss].sort() },
    },
  ]);
  expect(body.provider_summaries[world.ss]).toEqual({
    resources: { DISK_GB: { capacity: 2000, used: 0 } },
    traits: ['MISC_SHARES_VIA_AGGREGATE', 'STORAGE_DISK_SSD'],
    parent_provider_uuid: null,
    root_provider_uuid: world.ss,
  });
});

it('answers granular groups with their mappings, numbered from 1.25 and suffixed from 1.33', async () => {
  const q = 'resources=VCPU:1&resources1=VGPU:1&resources2=VGPU:1&group_policy=isolate';
  const { body } = await get(q);
  expect(body.allocation_requests).toHaveLength(4); // two nodes, two orders of their GPUs
  for (const r of body.allocation_requests) expect(r.mappings['1'][0]).not.toBe(r.mappings['2'][0]);
  expect((await get(q, '1.24')).status).toBe(400);
  expect((await get('resources_GPU=VGPU:1', '1.33')).body.allocation_requests).toHaveLength(4);
  expect((await get('resources_GPU=VGPU:1', '1.32')).status).toBe(400);
});

it('refuses what Placement refuses', async () => {
  const detail = async (q: string, v?: string) => {
    const r = await get(q, v);
    expect(r.status, q).toBe(400);
    return r.body.errors[0].detail as string;
  };
  expect(await detail('resources1=VCPU:1&resources2=VGPU:1')).toContain('"group_policy"');
  expect(await detail('resources=VCPU:1&required1=HW_CPU_X86_AVX', '1.35')).toContain(
    'orphaned traits keys: required1',
  );
  expect(await detail('resources=VCPU:1&required1=HW_CPU_X86_AVX')).toContain(
    "bad group(s) - ['1']",
  );
  expect(await detail('resources=VCPU:1&same_subtree=1,2&group_policy=none')).toContain(
    'Real suffixes',
  );
  expect(await detail('resources=VCPU:1&root_required=HW_CPU_X86_AVX,!HW_CPU_X86_AVX')).toContain(
    'root_required',
  );
  expect(await detail('resources=VCPU:1&required=CUSTOM_NOPE')).toBe(
    'No such trait(s): CUSTOM_NOPE.',
  );
  const many = Array.from({ length: 65 }, (_, i) => `resources${i + 1}=VCPU:1`).join('&');
  const r = await get(`${many}&group_policy=none`);
  expect(r.status).toBe(400);
  expect(r.body.errors[0].code).toBe('reshape.too_many_groups');
});

it('filters on root traits and subtrees', async () => {
  const avx = await get('resources=VCPU:1&root_required=HW_CPU_X86_AVX');
  expect(Object.keys(avx.body.allocation_requests[0].allocations)).toEqual([world.cn2.uuid]);
  const subtree = await get(
    'resources_G=VGPU:1&required_H=HW_CPU_X86_AVX&same_subtree=_G,_H&group_policy=none',
  );
  expect(subtree.body.allocation_requests.map((r: any) => r.mappings._G[0]).sort()).toEqual(
    [...world.cn2.gpus].sort(),
  );
});
