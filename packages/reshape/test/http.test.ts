import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';
import { compileEverySchema } from '../src/http/schemas.js';
import { serve } from './http-server.js';

const store = memoryStore();
const server = createPlacementServer(store, {
  auth: {
    validate: (t) =>
      t === 'admin' ? { roles: ['admin'] } : t === 'reader' ? { roles: ['reader'] } : undefined,
  },
});
let base = '';

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function api(
  method: string,
  path: string,
  body?: unknown,
  version = '1.39',
  headers: Record<string, string> = {},
) {
  const res = await fetch(base + path, {
    method,
    headers: {
      'x-auth-token': 'admin',
      'openstack-api-version': `placement ${version}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    // An error is JSON unless `accept` asked for HTML or plain text (as Placement's).
    body:
      text && /json/.test(res.headers.get('content-type') ?? '')
        ? (JSON.parse(text) as any)
        : undefined,
  };
}

describe('Placement HTTP API', () => {
  it('discovers versions without a token', async () => {
    const res = await fetch(`${base}/`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      versions: [{ id: 'v1.0', max_version: '1.39', min_version: '1.0', status: 'CURRENT' }],
    });
  });

  it('checks the token and the admin role', async () => {
    expect(
      (await api('GET', '/resource_providers', undefined, '1.39', { 'x-auth-token': '' })).status,
    ).toBe(401);
    const refused = await api('GET', '/resource_providers', undefined, '1.39', {
      'x-auth-token': 'nope',
    });
    expect(refused.status).toBe(401);
    // Placement's auth middleware answers before Placement: WebOb's body, not the error list.
    expect(refused.body).toEqual({
      message: 'The request you have made requires authentication.',
      code: '401 Unauthorized',
      title: 'Unauthorized',
    });
    const r = await api('GET', '/resource_providers', undefined, '1.39', {
      'x-auth-token': 'reader',
    });
    expect(r.status).toBe(403);
    expect(r.body.errors[0]).toMatchObject({
      status: 403,
      title: 'Forbidden',
      code: 'placement.undefined_code',
    });
    expect(r.body.errors[0].request_id).toMatch(/^req-/);
  });

  it('negotiates microversions', async () => {
    let r = await api('GET', '/resource_providers', undefined, '1.40');
    expect(r.status).toBe(406);
    expect(r.body.errors[0]).toMatchObject({ max_version: '1.39', min_version: '1.0' });
    r = await api('GET', '/resource_providers', undefined, 'one');
    expect(r.status).toBe(400);
    r = await api('GET', '/resource_providers', undefined, 'latest');
    expect(r.headers.get('openstack-api-version')).toBe('placement 1.39');
    r = await api('POST', '/reshaper', { inventories: {}, allocations: {} }, '1.29');
    expect(r.status).toBe(404);
    r = await api('GET', '/traits', undefined, '1.5');
    expect(r.status).toBe(404);
  });

  it('serves providers, inventories, allocations, usages and the reshaper', async () => {
    const rootUuid = randomUUID();
    let r = await api('POST', '/resource_providers', { name: 'cn1', uuid: rootUuid });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      uuid: rootUuid,
      generation: 0,
      parent_provider_uuid: null,
      root_provider_uuid: rootUuid,
    });
    r = await api(
      'POST',
      '/resource_providers',
      { name: 'cn1-gpu0', parent_provider_uuid: rootUuid },
      '1.14',
    );
    expect(r.status).toBe(201);
    const child = r.headers.get('location')!.split('/').pop()!;
    r = await api('POST', '/resource_providers', { name: 'cn1' });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.duplicate_name');
    r = await api('GET', `/resource_providers?in_tree=${child}`);
    expect(r.body.resource_providers.map((p: { uuid: string }) => p.uuid)).toEqual([
      rootUuid,
      child,
    ]);
    r = await api('PUT', `/resource_providers/${rootUuid}/inventories`, {
      resource_provider_generation: 0,
      inventories: { VCPU: { total: 8 }, VGPU: { total: 4, max_unit: 2 } },
    });
    expect(r.status).toBe(200);
    expect(r.body.resource_provider_generation).toBe(1);
    expect(r.body.inventories.VGPU).toEqual({
      total: 4,
      reserved: 0,
      min_unit: 1,
      max_unit: 2,
      step_size: 1,
      allocation_ratio: 1,
    });
    r = await api('PUT', `/resource_providers/${rootUuid}/inventories`, {
      resource_provider_generation: 0,
      inventories: {},
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.concurrent_update');

    const consumer = randomUUID();
    r = await api(
      'PUT',
      `/allocations/${consumer}`,
      {
        allocations: { [rootUuid]: { resources: { VCPU: 2, VGPU: 2 } } },
        project_id: 'p',
        user_id: 'u',
        consumer_generation: null,
      },
      '1.28',
    );
    expect(r.status).toBe(204);
    r = await api(
      'PUT',
      `/allocations/${consumer}`,
      {
        allocations: { [rootUuid]: { resources: { VCPU: 2 } } },
        project_id: 'p',
        user_id: 'u',
        consumer_generation: null,
      },
      '1.28',
    );
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.concurrent_update');
    r = await api(
      'PUT',
      `/allocations/${randomUUID()}`,
      {
        allocations: { [rootUuid]: { resources: { VGPU: 3 } } },
        project_id: 'p',
        user_id: 'u',
        consumer_generation: null,
      },
      '1.28',
    );
    expect(r.status).toBe(409);
    r = await api('GET', `/allocations/${consumer}`, undefined, '1.28');
    expect(r.body).toEqual({
      allocations: { [rootUuid]: { generation: 2, resources: { VCPU: 2, VGPU: 2 } } },
      project_id: 'p',
      user_id: 'u',
      consumer_generation: 1,
    });
    r = await api('PUT', `/resource_providers/${rootUuid}/inventories`, {
      resource_provider_generation: 2,
      inventories: { VCPU: { total: 8 } },
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.inventory.inuse');

    r = await api(
      'POST',
      '/reshaper',
      {
        inventories: {
          [rootUuid]: { resource_provider_generation: 2, inventories: { VCPU: { total: 8 } } },
          [child]: { resource_provider_generation: 0, inventories: { VGPU: { total: 4 } } },
        },
        allocations: {
          [consumer]: {
            allocations: {
              [rootUuid]: { resources: { VCPU: 2 } },
              [child]: { resources: { VGPU: 2 } },
            },
            project_id: 'p',
            user_id: 'u',
            consumer_generation: 1,
          },
        },
      },
      '1.30',
    );
    expect(r.status).toBe(204);
    r = await api('GET', `/resource_providers/${child}/usages`);
    // Three steps, as Placement's reshaper counts them: interim inventory, allocations, final inventory.
    expect(r.body).toEqual({ usages: { VGPU: 2 }, resource_provider_generation: 3 });
    r = await api('GET', `/resource_providers/${child}/allocations`);
    expect(r.body.allocations).toEqual({ [consumer]: { resources: { VGPU: 2 } } });
    r = await api('DELETE', `/resource_providers/${child}`);
    expect(r.status).toBe(409);
    r = await api(
      'POST',
      '/allocations',
      { [consumer]: { allocations: {}, project_id: 'p', user_id: 'u', consumer_generation: 2 } },
      '1.28',
    );
    expect(r.status).toBe(204);
    r = await api('DELETE', `/allocations/${consumer}`);
    expect(r.status).toBe(404);
    r = await api('DELETE', `/resource_providers/${rootUuid}`);
    expect(r.body.errors[0].code).toBe('placement.resource_provider.cannot_delete_parent');
    r = await api('PUT', '/resource_classes/CUSTOM_MAGIC', undefined, '1.7');
    expect(r.status).toBe(201);
    r = await api('GET', '/resource_classes', undefined, '1.7');
    expect(r.body.resource_classes.map((c: { name: string }) => c.name)).toContain('CUSTOM_MAGIC');
    r = await api('PUT', '/traits/CUSTOM_GOLD');
    expect(r.status).toBe(201);
    r = await api('PUT', `/resource_providers/${child}/traits`, {
      traits: ['CUSTOM_GOLD'],
      resource_provider_generation: 4,
    });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ traits: ['CUSTOM_GOLD'], resource_provider_generation: 5 });
  });

  it("validates bodies and query strings per microversion, with Placement's 400 texts", async () => {
    const rp = randomUUID();
    expect((await api('POST', '/resource_providers', { name: `v-${rp}`, uuid: rp })).status).toBe(
      200,
    );
    // The first paragraph: the rest names the failing keyword and instance, as Python's jsonschema.
    const detail = (r: { body: { errors: { detail: string }[] } }) =>
      r.body.errors[0]!.detail.split('\n\n')[0];
    let r = await api('PUT', `/resource_providers/${rp}/inventories`, { inventories: {} });
    expect(r.status).toBe(400);
    expect(detail(r)).toBe(
      "JSON does not validate: 'resource_provider_generation' is a required property",
    );
    r = await api('PUT', `/resource_providers/${rp}/inventories`, {
      resource_provider_generation: 0,
      inventories: { VCPU: { total: 0 } },
    });
    expect(detail(r)).toBe(
      'JSON does not validate: 0 is less than the minimum of 1 at /inventories/VCPU/total',
    );
    r = await api('POST', '/resource_providers', { name: 'x', uuid: 'nope' });
    expect(detail(r)).toBe("JSON does not validate: 'nope' is not a 'uuid' at /uuid");
    // parent_provider_uuid exists from 1.14 on.
    r = await api('POST', '/resource_providers', { name: 'x', parent_provider_uuid: rp }, '1.13');
    expect(detail(r)).toBe(
      "JSON does not validate: Additional properties are not allowed ('parent_provider_uuid' was unexpected)",
    );
    // consumer_generation is required from 1.28, consumer_type from 1.38.
    const alloc = { allocations: {}, project_id: 'p', user_id: 'u' };
    r = await api('PUT', `/allocations/${randomUUID()}`, alloc, '1.28');
    expect(detail(r)).toBe("JSON does not validate: 'consumer_generation' is a required property");
    r = await api(
      'PUT',
      `/allocations/${randomUUID()}`,
      { ...alloc, consumer_generation: null },
      '1.38',
    );
    expect(detail(r)).toBe("JSON does not validate: 'consumer_type' is a required property");
    r = await api('GET', '/usages?project_id=p&consumer_type=x', undefined, '1.38');
    expect(r.status).toBe(400);
    expect(detail(r)).toMatch(/^Invalid query string parameters: 'x' does not match/);
    r = await api('GET', '/usages?project_id=p&consumer_type=all', undefined, '1.37');
    expect(detail(r)).toBe(
      "Invalid query string parameters: Additional properties are not allowed ('consumer_type' was unexpected)",
    );
    r = await api('GET', '/allocation_candidates?resources=VCPU:1&limit=0', undefined, '1.16');
    expect(detail(r)).toBe(
      "Invalid query string parameters: '0' does not match '^[1-9][0-9]*$' at /limit",
    );
  });

  it('answers 404, 405, 406 and 415 like Placement', async () => {
    expect((await api('GET', '/nope')).status).toBe(404);
    const r = await api('PATCH', '/resource_providers');
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('GET, POST');
    expect(
      (await api('GET', '/resource_providers', undefined, '1.39', { accept: 'text/html' })).status,
    ).toBe(406);
    expect(
      (await api('POST', '/resource_providers', 'name=x', '1.39', { 'content-type': 'text/plain' }))
        .status,
    ).toBe(415);
    expect((await api('POST', '/resource_providers', '{bad json')).status).toBe(400);
    expect((await api('GET', `/resource_providers/${randomUUID()}`)).body.errors[0].code).toBe(
      'placement.undefined_code',
    );
  });

  it('answers the statuses Placement answers to odd requests', async () => {
    let r = await api('GET', '/allocations');
    expect(r.status).toBe(405);
    expect(r.body.errors[0].title).toBe('Method Not Allowed');
    expect(r.headers.get('allow')).toBe('POST');
    r = await api('GET', '/allocations', undefined, '1.0');
    expect(r.status).toBe(405);
    expect((await api('POST', '/allocations', {}, '1.12')).status).toBe(404);
    const rp = randomUUID();
    expect(
      (await api('DELETE', `/resource_providers/${rp}/inventories`, undefined, '1.4')).status,
    ).toBe(405);

    const res = await fetch(`${base}/resource_providers`, {
      method: 'POST',
      headers: { 'x-auth-token': 'admin' },
      body: new TextEncoder().encode('I want a resource provider please'),
    });
    expect(res.headers.get('content-type')).toBe('application/json');
    const err = ((await res.json()) as { errors: { status: number; detail: string }[] }).errors[0]!;
    expect(err.status).toBe(400);
    expect(err.detail).toContain('content-type header required');

    r = await api('GET', '/', undefined, '0.5');
    expect(r.status).toBe(406);
    expect(r.body.errors[0].detail).toContain('Unacceptable version header: 0.5');
    expect((await api('GET', '/', undefined, '1.40')).status).toBe(406);

    const text = { accept: 'text/plain' };
    r = await api('POST', '/resource_classes', { whoa: 'bad' }, '1.39', text);
    expect(r.status).toBe(400);
    expect((await api('GET', '/moo', undefined, '1.39', text)).status).toBe(404);
    expect((await api('GET', '/traits', undefined, '1.39', text)).status).toBe(406);

    r = await api('GET', '/traits?name=in_abc');
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toContain('Badly formatted name parameter');
    expect((await api('GET', '/traits?name=in:CUSTOM_NONE')).body.traits).toEqual([]);
  });

  it('never answers 500 to random JSON bodies', { timeout: 90_000 }, async () => {
    const rp = randomUUID();
    await api('POST', '/resource_providers', { name: 'fuzz', uuid: rp });
    const uuidish = fc.oneof(fc.constant(rp), fc.uuid(), fc.string());
    const json = fc.jsonValue({ maxDepth: 4 });
    const body = fc.oneof(
      json,
      fc.record(
        {
          inventories: fc.oneof(
            json,
            fc.dictionary(
              fc.constantFrom('VCPU', 'VGPU', 'bad', 'CUSTOM_X'),
              fc.oneof(json, fc.record({ total: json, max_unit: json })),
            ),
          ),
          resource_provider_generation: fc.oneof(json, fc.nat(3)),
        },
        { requiredKeys: [] },
      ),
      fc.record(
        {
          allocations: fc.oneof(
            json,
            fc.dictionary(
              uuidish,
              fc.record({
                resources: fc.oneof(json, fc.dictionary(fc.constantFrom('VCPU', 'x'), json)),
              }),
            ),
          ),
          project_id: json,
          user_id: json,
          consumer_generation: json,
          consumer_type: fc.oneof(json, fc.constantFrom('INSTANCE', 'bad type')),
        },
        { requiredKeys: [] },
      ),
      fc.record(
        { aggregates: fc.oneof(json, fc.array(uuidish)), resource_provider_generation: json },
        { requiredKeys: [] },
      ),
      fc.array(uuidish),
      fc.record({ name: json, uuid: uuidish, parent_provider_uuid: uuidish }, { requiredKeys: [] }),
    );
    const target = fc.constantFrom(
      ['PUT', `/resource_providers/${rp}/inventories`],
      ['POST', `/resource_providers/${rp}/inventories`],
      ['PUT', `/resource_providers/${rp}/inventories/VCPU`],
      ['PUT', `/resource_providers/${rp}/traits`],
      ['PUT', `/resource_providers/${rp}`],
      ['POST', '/resource_providers'],
      ['PUT', `/allocations/${randomUUID()}`],
      ['POST', '/allocations'],
      ['POST', '/reshaper'],
      ['POST', '/resource_classes'],
      ['PUT', `/resource_providers/${rp}/aggregates`],
    );
    const version = fc.constantFrom(
      '1.0',
      '1.8',
      '1.12',
      '1.14',
      '1.19',
      '1.20',
      '1.28',
      '1.30',
      '1.38',
      '1.39',
    );
    await fc.assert(
      fc.asyncProperty(target, body, version, async ([method, path], b, v) => {
        const r = await api(method, path, b, v);
        expect(r.status, JSON.stringify({ method, path, b, v, r: r.body })).toBeLessThan(500);
        if (r.status >= 400) expect(r.body.errors[0].status).toBe(r.status);
      }),
      { numRuns: 300 },
    );
  });
  it('finds allocation candidates across a tree', async () => {
    const store = memoryStore();
    const root = await store.createProvider({ name: 'ac-root' });
    const gpu = await store.createProvider({ name: 'ac-gpu', parentProviderUuid: root.uuid });
    await store.setInventories(root.uuid, { generation: 0, inventories: { VCPU: { total: 4 } } });
    await store.setInventories(gpu.uuid, {
      generation: 0,
      inventories: { VGPU: { total: 2, maxUnit: 1 } },
    });
    await store.createTrait('CUSTOM_FAST');
    await store.setTraits(gpu.uuid, { generation: 1, traits: ['CUSTOM_FAST'] });
    const server = createPlacementServer(store);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/allocation_candidates`;
    const get = async (q: string, v = '1.39') => {
      const res = await fetch(`${url}?${q}`, {
        headers: { 'openstack-api-version': `placement ${v}` },
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    try {
      const both = await get('resources=VCPU:2,VGPU:1&required=CUSTOM_FAST');
      expect(both.status).toBe(200);
      expect(both.body.allocation_requests).toEqual([
        {
          allocations: {
            [root.uuid]: { resources: { VCPU: 2 } },
            [gpu.uuid]: { resources: { VGPU: 1 } },
          },
          mappings: { '': [gpu.uuid, root.uuid].sort() },
        },
      ]);
      expect(both.body.provider_summaries[gpu.uuid]).toEqual({
        resources: { VGPU: { capacity: 2, used: 0 } },
        traits: ['CUSTOM_FAST'],
        parent_provider_uuid: root.uuid,
        root_provider_uuid: root.uuid,
      });
      // Before 1.29 a request may not span two providers of one tree.
      expect((await get('resources=VCPU:2,VGPU:1', '1.28')).body.allocation_requests).toEqual([]);
      expect((await get('resources=VGPU:2')).body.allocation_requests).toEqual([]); // max_unit
      expect((await get('resources=VCPU:5')).body.allocation_requests).toEqual([]); // capacity
      expect(
        (await get('resources=VCPU:1,VGPU:1&required=!CUSTOM_FAST')).body.allocation_requests,
      ).toEqual([]);
      expect((await get('resources=VCPU:1&limit=1')).body.allocation_requests).toHaveLength(1);
      expect((await get('resources=VCPU')).status).toBe(400);
      expect((await get('resources1=VCPU:1&resources2=VGPU:1')).status).toBe(400); // group_policy
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('never answers 500 to random query strings', { timeout: 60_000 }, async () => {
    const query = fc.dictionary(
      fc.constantFrom(
        'project_id',
        'user_id',
        'consumer_type',
        'in_tree',
        'name',
        'uuid',
        'x',
        'resources',
        'required',
        'limit',
        'resources1',
        'group_policy',
      ),
      fc.oneof(
        fc.string(),
        fc.constantFrom(
          'all',
          'unknown',
          'INSTANCE',
          'p',
          'VCPU:1',
          'VCPU:1,VGPU:2',
          '!HW_X',
          'in:A,B',
        ),
        fc.uuid(),
      ),
    );
    const path = fc.constantFrom('/usages', '/resource_providers', '/allocation_candidates');
    const version = fc.constantFrom('1.8', '1.9', '1.14', '1.37', '1.38', '1.39');
    await fc.assert(
      fc.asyncProperty(path, query, version, async (p, q, v) => {
        const r = await api('GET', `${p}?${new URLSearchParams(q).toString()}`, undefined, v);
        expect(r.status, JSON.stringify({ p, q, v, r: r.body })).toBeLessThan(500);
      }),
      { numRuns: 200 },
    );
  });
});

describe('mounted under a prefix with a body already read by a framework', () => {
  it('serves /placement/... and accepts a pre-parsed body', async () => {
    const { createServer } = await import('node:http');
    const { createPlacementHandler } = await import('../src/http/index.js');
    const handler = createPlacementHandler(memoryStore(), { basePath: '/placement' });
    const srv = createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => handler(req, res, text ? (JSON.parse(text) as unknown) : undefined));
    });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    try {
      const root = await fetch(`${url}/placement`);
      expect(
        ((await root.json()) as { versions: { links: { href: string }[] }[] }).versions[0]!
          .links[0]!.href,
      ).toBe('/placement');
      const created = await fetch(`${url}/placement/resource_providers`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'openstack-api-version': 'placement 1.20' },
        body: JSON.stringify({ name: 'mounted' }),
      });
      expect(created.status).toBe(200);
      const rp = (await created.json()) as { links: { href: string }[] };
      expect(rp.links[0]!.href).toMatch(/^\/placement\/resource_providers\//);
      expect((await fetch(`${url}/elsewhere`)).status).toBe(404);
    } finally {
      await new Promise((resolve) => srv.close(resolve));
    }
  });
});

describe('DELETE /allocations/{consumer}', () => {
  it('leaves the generations of the providers it frees as they are, as Placement', async () => {
    const store = memoryStore();
    const { call, close } = await serve(store);
    try {
      const rp = randomUUID();
      const consumer = randomUUID();
      await call('POST', '/resource_providers', { name: 'cn', uuid: rp });
      await call('PUT', `/resource_providers/${rp}/inventories`, {
        resource_provider_generation: 0,
        inventories: { VCPU: { total: 4 } },
      });
      await call('PUT', `/allocations/${consumer}`, {
        allocations: { [rp]: { resources: { VCPU: 1 } } },
        project_id: 'p',
        user_id: 'u',
        consumer_generation: null,
        consumer_type: 'INSTANCE',
      });
      expect((await store.getProvider(rp))!.generation).toBe(2);
      expect((await call('DELETE', `/allocations/${consumer}`)).status).toBe(204);
      expect((await store.getProvider(rp))!.generation).toBe(2);
      expect(await store.getAllocations(consumer)).toBeUndefined();
    } finally {
      await close();
    }
  });
});

describe('request schemas', () => {
  it('every variant of every body and query schema compiles under Ajv strict mode', () => {
    // Requests compile their schema on first use: this meets them all at once.
    expect(compileEverySchema()).toBeGreaterThan(40);
  });
});
