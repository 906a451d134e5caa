// Behaviour Placement's own functional tests (its gabbi files) check and that this server once
// answered differently: each case here is what Placement 8.0 answers on the wire.
import { randomUUID } from 'node:crypto';
import { connect, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';

const server = createPlacementServer(memoryStore());
let base = '';
let port = 0;

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function api(
  method: string,
  path: string,
  {
    body,
    version = '1.39',
    headers = {},
  }: { body?: unknown; version?: string; headers?: Record<string, string> } = {},
) {
  const res = await fetch(base + path, {
    method,
    headers: {
      'openstack-api-version': `placement ${version}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const json = res.headers.get('content-type')?.startsWith('application/json');
  return {
    status: res.status,
    headers: res.headers,
    text,
    body: text && json ? (JSON.parse(text) as any) : undefined,
  };
}

/** A provider with `inventories` and its generation after writing them. */
async function provider(inventories: Record<string, { total: number }>) {
  const uuid = randomUUID();
  expect((await api('POST', '/resource_providers', { body: { name: uuid, uuid } })).status).toBe(
    200,
  );
  const r = await api('PUT', `/resource_providers/${uuid}/inventories`, {
    body: { resource_provider_generation: 0, inventories },
  });
  expect(r.status).toBe(200);
  return { uuid, generation: r.body.resource_provider_generation as number };
}

async function allocate(consumer: string, rp: string, resources: Record<string, number>) {
  const r = await api('PUT', `/allocations/${consumer}`, {
    body: {
      allocations: { [rp]: { resources } },
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
      consumer_type: 'INSTANCE',
    },
  });
  expect(r.status).toBe(204);
}

describe('answers as Placement 8.0 does', () => {
  it('refuses a reshape that over-fills a class and drops an allocated one on the capacity, with placement.undefined_code', async () => {
    const rp = await provider({ VCPU: { total: 10 }, DISK_GB: { total: 100 } });
    await allocate(randomUUID(), rp.uuid, { VCPU: 6, DISK_GB: 20 });
    const before = await api('GET', `/resource_providers/${rp.uuid}/inventories`);
    const r = await api('POST', '/reshaper', {
      body: {
        inventories: {
          [rp.uuid]: {
            resource_provider_generation: rp.generation + 1,
            inventories: { VCPU: { total: 1 } },
          },
        },
        allocations: {
          [randomUUID()]: {
            allocations: { [rp.uuid]: { resources: { VCPU: 1 } } },
            consumer_generation: null,
            consumer_type: 'INSTANCE',
            project_id: 'p',
            user_id: 'u',
          },
        },
      },
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.undefined_code');
    expect(r.body.errors[0].detail).toMatch(/^Unable to allocate inventory: .*'VCPU'/);
    // Nothing changed.
    expect((await api('GET', `/resource_providers/${rp.uuid}/inventories`)).body).toEqual(
      before.body,
    );
  });

  it('still refuses a reshape dropping an allocated class with placement.inventory.inuse when its allocations fit', async () => {
    const rp = await provider({ VCPU: { total: 10 }, DISK_GB: { total: 100 } });
    await allocate(randomUUID(), rp.uuid, { VCPU: 6, DISK_GB: 20 });
    const r = await api('POST', '/reshaper', {
      body: {
        inventories: {
          [rp.uuid]: {
            resource_provider_generation: rp.generation + 1,
            inventories: { VCPU: { total: 10 } },
          },
        },
        allocations: {},
      },
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].code).toBe('placement.inventory.inuse');
  });

  it('words a consumer generation conflict as Placement does', async () => {
    const rp = await provider({ VCPU: { total: 10 } });
    const consumer = randomUUID();
    await allocate(consumer, rp.uuid, { VCPU: 1 });
    const r = await api('PUT', `/allocations/${consumer}`, {
      body: {
        allocations: { [rp.uuid]: { resources: { VCPU: 2 } } },
        project_id: 'p',
        user_id: 'u',
        consumer_generation: 7,
        consumer_type: 'INSTANCE',
      },
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0]).toMatchObject({
      code: 'placement.concurrent_update',
      detail: 'consumer generation conflict - expected 1 but got 7',
    });
  });

  it('sends cache-control and last-modified from 1.15 on GET /, answers with a body and PUT /traits/{name}, never on a 204 write', async () => {
    const stamp = /^\w+, \d+ \w+ \d{4} [\d:]+ GMT$/;
    const cached = (h: Headers) =>
      h.get('cache-control') === 'no-cache' && stamp.test(h.get('last-modified') ?? '');
    expect(cached((await api('GET', '/', { version: '1.15' })).headers)).toBe(true);
    expect((await api('GET', '/', { version: '1.14' })).headers.get('last-modified')).toBeNull();
    const trait = await api('PUT', '/traits/CUSTOM_CACHED', { version: '1.15' });
    expect(trait.status).toBe(201);
    expect(cached(trait.headers)).toBe(true);
    const old = await api('PUT', '/traits/CUSTOM_CACHED', { version: '1.14' });
    expect(old.status).toBe(204);
    expect(old.headers.get('cache-control')).toBeNull();

    const uuid = randomUUID();
    await api('POST', '/resource_providers', { body: { name: uuid, uuid } });
    const inv = await api('PUT', `/resource_providers/${uuid}/inventories`, {
      version: '1.15',
      body: { resource_provider_generation: 0, inventories: { VCPU: { total: 4 } } },
    });
    expect(inv.status).toBe(200);
    expect(cached(inv.headers)).toBe(true);
    const agg = await api('PUT', `/resource_providers/${uuid}/aggregates`, {
      version: '1.19',
      body: { aggregates: [randomUUID()], resource_provider_generation: 1 },
    });
    expect(agg.status).toBe(200);
    expect(cached(agg.headers)).toBe(true);
    const write = await api('PUT', `/allocations/${randomUUID()}`, {
      version: '1.15',
      body: { allocations: { [uuid]: { resources: { VCPU: 1 } } }, project_id: 'p', user_id: 'u' },
    });
    expect(write.status).toBe(204);
    expect(write.headers.get('cache-control')).toBeNull();
    expect(write.headers.get('last-modified')).toBeNull();
  });

  it('answers an error in HTML or plain text when accept asks for it, JSON otherwise', async () => {
    const html = await api('GET', `/${randomUUID()}`, { headers: { accept: 'text/html' } });
    expect(html.status).toBe(404);
    expect(html.headers.get('content-type')).toMatch(/^text\/html/);
    expect(html.text).toContain('The resource could not be found');
    expect(html.text).toContain('<title>404 Not Found</title>');

    const version = await api('GET', '/', {
      version: '0.5',
      headers: { accept: 'text/html' },
    });
    expect(version.status).toBe(406);
    expect(version.headers.get('content-type')).toMatch(/^text\/html/);
    expect(version.text).toContain('Unacceptable version header: 0.5');

    const plain = await api('GET', '/resource_providers', { headers: { accept: 'text/plain' } });
    expect(plain.status).toBe(406);
    expect(plain.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(plain.text).toMatch(/^406 Not Acceptable\n\n/);

    const preferred = await api('GET', `/${randomUUID()}`, {
      headers: { accept: 'text/html;q=0.5, application/json' },
    });
    expect(preferred.headers.get('content-type')).toMatch(/^application\/json/);
    expect(preferred.body.errors[0].status).toBe(404);
    for (const accept of [undefined, '*/*', 'application/json']) {
      const r = await api('GET', `/${randomUUID()}`, accept ? { headers: { accept } } : {});
      expect(r.body.errors[0].status).toBe(404);
    }
  });

  it('escapes what an HTML error echoes', async () => {
    const r = await api('GET', '/', {
      version: '0.<b>',
      headers: { accept: 'text/html' },
    });
    expect(r.status).toBe(400);
    expect(r.text).not.toContain('<b>');
    expect(r.text).toContain('&lt;b&gt;');
  });

  it('answers a content-length that is not an integer with Placement 400 body', async () => {
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.write(
          'POST /resource_providers HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: hi mom\r\n\r\n{}',
        );
      });
      let text = '';
      socket.on('data', (c: Buffer) => (text += c.toString()));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as any;
    expect(body.errors[0]).toMatchObject({
      status: 400,
      detail: 'content-length header must be an integer',
    });
  });

  it('names the method in a 405', async () => {
    for (const method of ['DELETE', 'OPTIONS']) {
      const r = await api(method, '/resource_providers');
      expect(r.status).toBe(405);
      expect(r.body.errors[0].detail).toBe(
        `The method ${method} is not allowed for this resource.`,
      );
      expect(r.headers.get('allow')).toMatch(/GET, POST|POST, GET/);
    }
  });

  describe('PUT /resource_classes/{name}', () => {
    it('renames a custom class from 1.2 to 1.6', async () => {
      expect(
        (await api('POST', '/resource_classes', { body: { name: 'CUSTOM_OLD_NAME' } })).status,
      ).toBe(201);
      const r = await api('PUT', '/resource_classes/CUSTOM_OLD_NAME', {
        version: '1.6',
        body: { name: 'CUSTOM_NEW_NAME' },
      });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({
        name: 'CUSTOM_NEW_NAME',
        links: [{ rel: 'self', href: '/resource_classes/CUSTOM_NEW_NAME' }],
      });
      expect(r.headers.get('last-modified')).toBeNull();
      expect((await api('GET', '/resource_classes/CUSTOM_OLD_NAME')).status).toBe(404);
      expect((await api('GET', '/resource_classes/CUSTOM_NEW_NAME')).status).toBe(200);
    });

    it('refuses as Placement does: standard 400, taken 409, unknown 404, bad body 400, no body 400, before 1.2 404', async () => {
      await api('POST', '/resource_classes', { body: { name: 'CUSTOM_RC_A' } });
      await api('POST', '/resource_classes', { body: { name: 'CUSTOM_RC_B' } });
      const put = (name: string, body: unknown, version = '1.6') =>
        api('PUT', `/resource_classes/${name}`, { version, body });
      const standard = await put('VCPU', { name: 'CUSTOM_RC_C' });
      expect(standard.status).toBe(400);
      expect(standard.body.errors[0].detail).toBe('Cannot update standard resource class VCPU');
      const taken = await put('CUSTOM_RC_A', { name: 'CUSTOM_RC_B' });
      expect(taken.status).toBe(409);
      expect(taken.body.errors[0].detail).toBe('Resource class already exists: CUSTOM_RC_B');
      expect((await put('CUSTOM_NOT_THERE', { name: 'CUSTOM_RC_C' })).status).toBe(404);
      const schema = await put('CUSTOM_RC_A', { name: 'VCPU' });
      expect(schema.status).toBe(400);
      expect(schema.body.errors[0].detail).toMatch(/^JSON does not validate/);
      const extra = await put('CUSTOM_RC_A', { name: 'CUSTOM_RC_C', additional: 1 });
      expect(extra.body.errors[0].detail).toMatch(/Additional properties are not allowed/);
      const bodiless = await fetch(`${base}/resource_classes/CUSTOM_RC_A`, {
        method: 'PUT',
        headers: { 'openstack-api-version': 'placement 1.6', 'content-type': 'application/json' },
      });
      expect(bodiless.status).toBe(400);
      expect(((await bodiless.json()) as any).errors[0].detail).toMatch(/^Malformed JSON:/);
      expect((await put('CUSTOM_RC_A', { name: 'CUSTOM_RC_C' }, '1.1')).status).toBe(404);
      // Nothing was renamed by the refused requests.
      const names = (await api('GET', '/resource_classes')).body.resource_classes.map(
        (c: { name: string }) => c.name,
      );
      expect(names).toEqual(expect.arrayContaining(['CUSTOM_RC_A', 'CUSTOM_RC_B']));
      expect(names).not.toContain('CUSTOM_RC_C');
    });

    it('creates without a body from 1.7', async () => {
      const r = await fetch(`${base}/resource_classes/CUSTOM_SEVEN`, {
        method: 'PUT',
        headers: { 'openstack-api-version': 'placement 1.7' },
      });
      expect(r.status).toBe(201);
    });

    it('renames a class that inventories and allocations use, in place, as Placement does', async () => {
      await api('POST', '/resource_classes', { body: { name: 'CUSTOM_USED' } });
      const rp = await provider({ CUSTOM_USED: { total: 4 } });
      const consumer = randomUUID();
      await allocate(consumer, rp.uuid, { CUSTOM_USED: 2 });
      const generation = (await api('GET', `/resource_providers/${rp.uuid}`)).body.generation;
      const r = await api('PUT', '/resource_classes/CUSTOM_USED', {
        version: '1.6',
        body: { name: 'CUSTOM_MOVED' },
      });
      expect(r.status).toBe(200);
      expect(r.body.name).toBe('CUSTOM_MOVED');
      expect((await api('GET', '/resource_classes/CUSTOM_USED')).status).toBe(404);
      expect((await api('GET', '/resource_classes/CUSTOM_MOVED')).status).toBe(200);
      const inv = await api('GET', `/resource_providers/${rp.uuid}/inventories`);
      expect(Object.keys(inv.body.inventories)).toEqual(['CUSTOM_MOVED']);
      expect(inv.body.resource_provider_generation).toBe(generation);
      const usages = await api('GET', `/resource_providers/${rp.uuid}/usages`);
      expect(usages.body.usages).toEqual({ CUSTOM_MOVED: 2 });
      const allocations = await api('GET', `/allocations/${consumer}`);
      expect(allocations.body.allocations[rp.uuid].resources).toEqual({ CUSTOM_MOVED: 2 });
    });
  });

  it('words refused writes as Placement does', async () => {
    const rp = await provider({ VCPU: { total: 4 } });
    const missing = randomUUID();
    const consumer = randomUUID();
    const put = (allocations: unknown) =>
      api('PUT', `/allocations/${consumer}`, {
        body: {
          allocations,
          project_id: 'p',
          user_id: 'u',
          consumer_generation: null,
          consumer_type: 'INSTANCE',
        },
      });
    let r = await put({ [missing]: { resources: { VCPU: 1 } } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toBe(
      `Allocation for resource provider '${missing}' that does not exist.`,
    );
    r = await put({ [rp.uuid]: { resources: { CUSTOM_PONY: 1 } } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toBe(
      `Unable to allocate inventory for consumer ${consumer}: No such resource class CUSTOM_PONY.`,
    );
    r = await put({ [rp.uuid]: { resources: { DISK_GB: 1 } } });
    expect(r.status).toBe(409);
    expect(r.body.errors[0].detail).toContain(
      `Inventory for 'DISK_GB' on resource provider '${rp.uuid}' invalid.`,
    );

    r = await api('GET', `/resource_providers/${missing}/inventories`);
    expect(r.status).toBe(404);
    expect(r.body.errors[0].detail).toBe(`No resource provider with uuid ${missing} found`);
    r = await api('DELETE', `/resource_providers/${missing}`);
    expect(r.status).toBe(404);
    expect(r.body.errors[0].detail).toBe(
      `No resource provider with uuid ${missing} found for delete`,
    );

    r = await api('PUT', `/resource_providers/${rp.uuid}/traits`, {
      body: { traits: [], resource_provider_generation: rp.generation + 5 },
    });
    expect(r.status).toBe(409);
    expect(r.body.errors[0]).toMatchObject({
      code: 'placement.concurrent_update',
      detail:
        "Resource provider's generation already changed. Please update the generation and try again.",
    });
    r = await api('PUT', `/resource_providers/${rp.uuid}`, {
      body: { name: rp.uuid, parent_provider_uuid: rp.uuid },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toContain('creating loop in the provider tree is not allowed.');
    const self = randomUUID();
    r = await api('POST', '/resource_providers', {
      body: { name: self, uuid: self, parent_provider_uuid: self },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toContain('parent provider UUID cannot be same as UUID');
  });

  it('words invalid inventories, classes in use, un-parenting and refused keys as Placement does', async () => {
    const rp = await provider({ VCPU: { total: 4 } });
    let r = await api('PUT', `/resource_providers/${rp.uuid}/inventories`, {
      body: { resource_provider_generation: rp.generation, inventories: { HOUSE: { total: 1 } } },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toBe(
      `Unknown resource class in inventory for resource provider ${rp.uuid}: No such resource class HOUSE.`,
    );
    r = await api('POST', `/resource_providers/${rp.uuid}/inventories`, {
      body: { resource_class: 'DISK_GB', total: 10, reserved: 20 },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toMatch(
      new RegExp(
        `^Unable to create inventory for resource provider ${rp.uuid}: .*The reserved value is greater than`,
      ),
    );
    r = await api('PUT', `/resource_providers/${rp.uuid}/inventories`, {
      body: {
        resource_provider_generation: rp.generation,
        inventories: { DISK_GB: { total: 10, reserved: 20 } },
      },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toBe(
      `Unable to update inventory for resource provider ${rp.uuid}: Invalid inventory for 'DISK_GB'. The reserved value is greater than total.`,
    );

    await api('PUT', '/resource_classes/CUSTOM_GOLD', { version: '1.7' });
    const gold = await provider({ CUSTOM_GOLD: { total: 1 } });
    r = await api('DELETE', '/resource_classes/CUSTOM_GOLD');
    expect(r.status).toBe(409);
    expect(r.body.errors[0].detail).toBe(
      'Error in delete resource class: Cannot delete resource class CUSTOM_GOLD. Class is in use in inventory.',
    );

    const child = randomUUID();
    await api('POST', '/resource_providers', {
      body: { name: child, uuid: child, parent_provider_uuid: gold.uuid },
    });
    r = await api('PUT', `/resource_providers/${child}`, {
      version: '1.36',
      body: { name: child, parent_provider_uuid: null },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toContain('un-parenting a provider is not currently allowed');

    r = await api('PUT', `/allocations/${randomUUID()}`, {
      version: '1.12',
      body: {
        allocations: { nice_house: { resources: { VCPU: 1 } } },
        project_id: 'p',
        user_id: 'u',
      },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toMatch(
      /^JSON does not validate: 'nice_house' does not match any of the regexes/,
    );
    r = await api('PUT', '/traits/CUSTOM_' + 'A'.repeat(300));
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toMatch(
      /^The trait is invalid\. A valid trait must be no longer than 255 characters/,
    );
  });

  it('names every class in use when DELETE …/inventories is refused, in resource class order', async () => {
    const rp = await provider({
      DISK_GB: { total: 100 },
      VCPU: { total: 8 },
      MEMORY_MB: { total: 64 },
    });
    await allocate(randomUUID(), rp.uuid, { DISK_GB: 10, VCPU: 1 });
    const r = await api('DELETE', `/resource_providers/${rp.uuid}/inventories`);
    expect(r.status).toBe(409);
    expect(r.body.errors[0]).toMatchObject({
      code: 'placement.inventory.inuse',
      detail: `Inventory for 'VCPU, DISK_GB' on resource provider '${rp.uuid}' in use.`,
    });
    expect(
      Object.keys(
        (await api('GET', `/resource_providers/${rp.uuid}/inventories`)).body.inventories,
      ),
    ).toHaveLength(3);
  });

  it('answers PUT …/aggregates with the aggregates in the order the request gave them', async () => {
    const rp = await provider({ VCPU: { total: 1 } });
    const aggs = ['f', 'a', 'c'].map((h) => `${h.repeat(8)}${randomUUID().slice(8)}`);
    const r = await api('PUT', `/resource_providers/${rp.uuid}/aggregates`, {
      body: { aggregates: aggs, resource_provider_generation: rp.generation },
    });
    expect(r.status).toBe(200);
    expect(r.body.aggregates).toEqual(aggs);
  });

  it("counts a reshape's generations as Placement does: interim inventory, allocations, final inventory", async () => {
    const parent = await provider({ VCPU: { total: 8 }, DISK_GB: { total: 100 } });
    const other = await provider({ VCPU: { total: 8 } });
    const emptied = await provider({ VCPU: { total: 8 } });
    const consumer = randomUUID();
    await allocate(consumer, emptied.uuid, { VCPU: 2 });
    const gen = async (uuid: string) =>
      (await api('GET', `/resource_providers/${uuid}`)).body.generation as number;
    const [p0, o0, e0] = [await gen(parent.uuid), await gen(other.uuid), await gen(emptied.uuid)];
    const r = await api('POST', '/reshaper', {
      body: {
        inventories: {
          [parent.uuid]: { resource_provider_generation: p0, inventories: { VCPU: { total: 8 } } },
          [other.uuid]: { resource_provider_generation: o0, inventories: { VCPU: { total: 8 } } },
          [emptied.uuid]: { resource_provider_generation: e0, inventories: {} },
        },
        allocations: {
          [consumer]: {
            allocations: { [parent.uuid]: { resources: { VCPU: 2 } } },
            consumer_generation: 1,
            consumer_type: 'INSTANCE',
            project_id: 'p',
            user_id: 'u',
          },
        },
      },
    });
    expect(r.status).toBe(204);
    expect(await gen(parent.uuid)).toBe(p0 + 3); // interim, allocations, final
    expect(await gen(other.uuid)).toBe(o0 + 2); // interim, final
    expect(await gen(emptied.uuid)).toBe(e0 + 2); // allocations moved away, final (no interim)
  });

  it('keeps provider generations when DELETE /allocations/{consumer} removes a consumer', async () => {
    const rp = await provider({ VCPU: { total: 10 } });
    const consumer = randomUUID();
    await allocate(consumer, rp.uuid, { VCPU: 2 });
    const before = (await api('GET', `/resource_providers/${rp.uuid}`)).body.generation as number;
    expect((await api('DELETE', `/allocations/${consumer}`)).status).toBe(204);
    const after = await api('GET', `/resource_providers/${rp.uuid}`);
    expect(after.body.generation).toBe(before);
    expect((await api('GET', `/resource_providers/${rp.uuid}/usages`)).body.usages).toEqual({
      VCPU: 0,
    });
  });
});
