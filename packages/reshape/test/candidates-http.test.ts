import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
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

it("checks the keys of the query as Placement's schema does, naming the patterns missed", async () => {
  const detail = async (q: string, v: string) => {
    const r = await get(q, v);
    expect(r.status, q).toBe(400);
    return r.body.errors[0].detail as string;
  };
  expect(await detail('resources01=VCPU:1', '1.25')).toContain(
    "'resources01' does not match any of the regexes: '^member_of([1-9][0-9]*)?$', '^required([1-9][0-9]*)?$', '^resources([1-9][0-9]*)?$'",
  );
  expect(await detail('resources1@=VCPU:1', '1.33')).toContain(
    "'^in_tree([a-zA-Z0-9_-]{1,64})?$', '^member_of([a-zA-Z0-9_-]{1,64})?$'",
  );
  expect(await detail('resources=VCPU:1&root_required=HW_CPU_X86_AVX', '1.34')).toContain(
    "'root_required' does not match any of the regexes",
  );
  expect(await detail('resources=VCPU:1&in_tree=life-is-beautiful', '1.31')).toContain(
    "Expected 'in_tree' parameter to be a format of uuid. Got: life-is-beautiful",
  );
  expect(await detail('resources=VCPU:1&group_policy=bogus', '1.25')).toContain(
    "'bogus' is not one of ['none', 'isolate']",
  );
  // Long suffixes from 1.33 on, whatever schema the later microversions add.
  for (const v of ['1.33', '1.34'])
    expect((await get('resources=VCPU:1&resources_GPU=VGPU:1&group_policy=none', v)).status).toBe(
      200,
    );
});

it('refuses the shape of a query before looking up its traits and classes', async () => {
  const detail = async (q: string, v: string) => {
    const r = await get(q, v);
    expect(r.status, q).toBe(400);
    return r.body.errors[0].detail as string;
  };
  expect(await detail('required=CUSTOM_NOPE&required1=CUSTOM_NOPE_TOO', '1.25')).toContain(
    'orphaned traits keys: required, required1',
  );
  expect(await detail('resources1=CUSTOM_NOPE:1&resources2=VCPU:1', '1.25')).toContain(
    '"group_policy" parameter is required',
  );
  expect(await detail('resources=CUSTOM_NOPE:1&required=CUSTOM_NOPE_TOO', '1.25')).toBe(
    'Invalid resource class in resources parameter: No such resource class CUSTOM_NOPE.',
  );
});

it('answers the error codes Placement gives to bad query values', async () => {
  const code = async (q: string) => {
    const r = await get(q, '1.36');
    expect(r.status, q).toBe(400);
    return r.body.errors[0].code as string;
  };
  expect(
    await code('resources=VCPU:1&root_required=HW_CPU_X86_AVX&root_required=!HW_NUMA_ROOT'),
  ).toBe('placement.query.duplicate_key');
  expect(await code('resources=VCPU:1&root_required=HW_CPU_X86_AVX,!HW_CPU_X86_AVX')).toBe(
    'placement.query.bad_value',
  );
  expect(await code('member_of1=' + AGG_FOR_CODES)).toBe('placement.query.missing_value');
  expect(await code('resources=VCPU:1&required1=HW_CPU_X86_AVX')).toBe('placement.query.bad_value');
  expect(await code('resources=VCPU:1&same_subtree=_A,')).toBe('placement.query.bad_value');
  expect(
    await code('resources=VCPU:1&resources_A=VGPU:1&same_subtree=_A,_B&group_policy=none'),
  ).toBe('placement.query.bad_value');
});

const AGG_FOR_CODES = '2d3f0e4c-7b36-4f0e-9a4c-1e5c4b1f6a10';

it('checks the mappings of allocations written from 1.34', async () => {
  const put = async (mappings: unknown) => {
    const res = await fetch(
      base.replace('/allocation_candidates', `/allocations/${randomUUID()}`),
      {
        method: 'PUT',
        headers: { 'openstack-api-version': 'placement 1.34', 'content-type': 'application/json' },
        body: JSON.stringify({
          allocations: { [world.cn1.uuid]: { resources: { VCPU: 1 } } },
          mappings,
          consumer_generation: null,
          project_id: 'p',
          user_id: 'u',
        }),
      },
    );
    return {
      status: res.status,
      body: res.status === 204 ? undefined : ((await res.json()) as any),
    };
  };
  const bad = await put({ alpha: 'beta' });
  expect(bad.status).toBe(400);
  expect(bad.body.errors[0].detail).toMatch(
    /^JSON does not validate: 'beta' is not of type 'array'/,
  );
  const empty = await put({});
  expect(empty.status).toBe(400);
  expect(empty.body.errors[0].detail).toMatch(
    /^JSON does not validate: \{\} does not have enough properties/,
  );
  expect((await put({ alpha: [] })).status).toBe(400);
  expect((await put({ alpha: ['not-a-uuid'] })).status).toBe(400);
  expect((await put({ '': [world.cn1.uuid] })).status).toBe(204);
});
