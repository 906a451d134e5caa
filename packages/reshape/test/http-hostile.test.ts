// Requests an attacker would send: values that overflow a naive error message, bodies past the
// limit, and keys that are Object.prototype's names.
import { randomUUID } from 'node:crypto';
import { request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import {
  createPlacementServer,
  DEFAULT_MAX_BODY_BYTES,
  type PlacementHandlerOptions,
} from '../src/http/index.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

async function start(options: PlacementHandlerOptions = {}) {
  const store = memoryStore();
  server = createPlacementServer(store, options);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return { store, port: (server.address() as AddressInfo).port };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

/** Sends the whole body before reading the answer, as simple clients do. */
function send(port: number, method: string, path: string, body?: string | Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: {
          'openstack-api-version': 'placement 1.39',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode!,
            headers: res.headers,
            body: text ? JSON.parse(text) : undefined,
          });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('error messages', () => {
  it('answer 400 to a 100,000-deep value, never 500', async () => {
    const { port } = await start();
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    for (const body of [`{"name":${deep}}`, `{"name":"a","uuid":${deep}}`]) {
      const r = await send(port, 'POST', '/resource_providers', body);
      expect(r.status).toBe(400);
      expect(r.body.errors[0].code).toBe('placement.undefined_code');
      expect(r.body.errors[0].detail.length).toBeLessThan(800);
    }
  });

  it('echo at most a bounded part of a long value', async () => {
    const { port } = await start();
    const name = 'x'.repeat(100 * 1024);
    const r = await send(port, 'POST', '/resource_providers', JSON.stringify({ name }));
    expect(r.status).toBe(400);
    expect(r.body.errors[0].detail).toMatch(/^JSON does not validate: 'x+\.\.\.' is too long/);
    expect(r.body.errors[0].detail.length).toBeLessThan(800);
  });
});

describe('an oversize body', () => {
  it('is answered 413 with Connection: close after draining, not a reset', async () => {
    const { port, store } = await start({ maxBodyBytes: 1024 });
    const body = JSON.stringify({ name: 'y'.repeat(256 * 1024) });
    const r = await send(port, 'POST', '/resource_providers', body);
    expect(r.status).toBe(413);
    expect(r.headers.connection).toBe('close');
    expect(r.body.errors[0].status).toBe(413);
    expect(await store.listProviders()).toEqual([]);
  });

  it('is past 4 MiB by default, which fits a reshape of 10,000 consumers', async () => {
    expect(DEFAULT_MAX_BODY_BYTES).toBe(4 * 1024 * 1024);
    const { port } = await start();
    const allocations: Record<string, unknown> = {};
    for (let i = 0; i < 10_000; i++)
      allocations[randomUUID()] = {
        allocations: {
          [randomUUID()]: { resources: { VCPU: 4, MEMORY_MB: 8192 } },
          [randomUUID()]: { resources: { VGPU: 1 } },
        },
        project_id: randomUUID().replaceAll('-', ''),
        user_id: randomUUID().replaceAll('-', ''),
        consumer_generation: 12,
        consumer_type: 'INSTANCE',
      };
    const reshape = JSON.stringify({ inventories: {}, allocations });
    expect(reshape.length).toBeLessThan(DEFAULT_MAX_BODY_BYTES);
    // Under the limit: read and judged (400: the providers do not exist), not 413.
    expect((await send(port, 'POST', '/reshaper', reshape)).status).toBe(400);
    const over = Buffer.alloc(DEFAULT_MAX_BODY_BYTES + 1, 0x20);
    expect((await send(port, 'POST', '/reshaper', over)).status).toBe(413);
  });
});

describe('keys named like Object.prototype', () => {
  it('are refused as unknown resource classes', async () => {
    const { port, store } = await start();
    const rp = randomUUID();
    await store.createProvider({ name: 'cn', uuid: rp });
    await store.setInventories(rp, { generation: 0, inventories: { VCPU: { total: 4 } } });
    for (const name of ['__proto__', 'constructor', 'toString']) {
      for (const path of [
        `/resource_providers?resources=${name}:1`,
        `/allocation_candidates?resources=${name}:1`,
      ]) {
        const r = await send(port, 'GET', path);
        expect(r.status, path).toBe(400);
        expect(r.body.errors[0].detail).toContain(`No such resource class ${name}`);
      }
    }
    const put = await send(
      port,
      'PUT',
      `/allocations/${randomUUID()}`,
      `{"allocations":{"${rp}":{"resources":{"__proto__":1}}},"project_id":"p","user_id":"u","consumer_generation":null}`,
    );
    expect(put.status).toBe(400);
    const inv = await send(
      port,
      'PUT',
      `/resource_providers/${rp}/inventories`,
      `{"resource_provider_generation":1,"inventories":{"__proto__":{"total":1}}}`,
    );
    expect(inv.status).toBe(400);
    expect((await store.getInventories(rp)).inventories).toEqual({
      VCPU: expect.objectContaining({ total: 4 }),
    });
  });
});
