// Every create answers an absolute Location, as Placement's do: clients (keystoneauth) join a
// path to their endpoint, so `/placement/resource_providers/…` became `…/placement/placement/…`.
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementHandler, type PlacementHandlerOptions } from '../src/http/index.js';

let server: Server | undefined;
afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

async function start(options: PlacementHandlerOptions = {}): Promise<number> {
  const handler = createPlacementHandler(memoryStore(), options);
  server = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** One request with the headers given (fetch does not let a test choose `Host`). */
function send(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined> }> {
  const text = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: {
          'openstack-api-version': 'placement 1.20',
          ...(text === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

const RP = '7d8c2a34-0000-4000-8000-000000000001';

describe('Location', () => {
  it('is absolute on every create, from the Host header and the mount prefix', async () => {
    const port = await start({ basePath: '/placement' });
    const host = { host: `cloud.example:${port}` };
    let r = await send(port, 'POST', '/placement/resource_providers', host, {
      name: 'cn1',
      uuid: RP,
    });
    expect(r.status).toBe(200);
    expect(r.headers.location).toBe(
      `http://cloud.example:${port}/placement/resource_providers/${RP}`,
    );
    r = await send(port, 'PUT', `/placement/resource_providers/${RP}/inventories`, host, {
      resource_provider_generation: 0,
      inventories: {},
    });
    expect(r.status).toBe(200);
    r = await send(port, 'POST', `/placement/resource_providers/${RP}/inventories`, host, {
      resource_provider_generation: 1,
      resource_class: 'VCPU',
      total: 4,
    });
    expect(r.status).toBe(201);
    expect(r.headers.location).toBe(
      `http://cloud.example:${port}/placement/resource_providers/${RP}/inventories/VCPU`,
    );
    r = await send(port, 'PUT', '/placement/traits/CUSTOM_GOLD', host);
    expect(r.headers.location).toBe(`http://cloud.example:${port}/placement/traits/CUSTOM_GOLD`);
    r = await send(port, 'POST', '/placement/resource_classes', host, { name: 'CUSTOM_A' });
    expect(r.status).toBe(201);
    expect(r.headers.location).toBe(
      `http://cloud.example:${port}/placement/resource_classes/CUSTOM_A`,
    );
    r = await send(port, 'PUT', '/placement/resource_classes/CUSTOM_B', host);
    expect(r.headers.location).toBe(
      `http://cloud.example:${port}/placement/resource_classes/CUSTOM_B`,
    );
  });

  it('ignores X-Forwarded-* unless told to trust them', async () => {
    const forwarded = {
      host: 'inner:8778',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'cloud.example',
      'x-forwarded-prefix': '/api/',
    };
    let port = await start();
    let r = await send(port, 'POST', '/resource_providers', forwarded, { name: 'a', uuid: RP });
    expect(r.headers.location).toBe(`http://inner:8778/resource_providers/${RP}`);
    await new Promise((resolve) => server!.close(resolve));
    port = await start({ trustForwardedHeaders: true });
    r = await send(port, 'POST', '/resource_providers', forwarded, { name: 'a', uuid: RP });
    expect(r.headers.location).toBe(`https://cloud.example/api/resource_providers/${RP}`);
  });

  it('never echoes a malformed host', async () => {
    const port = await start({ trustForwardedHeaders: true });
    const r = await send(
      port,
      'POST',
      '/resource_providers',
      { host: 'a b', 'x-forwarded-host': 'evil"\\x', 'x-forwarded-prefix': '//x y' },
      { name: 'a', uuid: RP },
    );
    expect(r.headers.location).toBe(`http://127.0.0.1:${port}/resource_providers/${RP}`);
    expect(() =>
      createPlacementHandler(memoryStore(), { trustForwardedHeaders: 'yes' as never }),
    ).toThrow(TypeError);
  });
});
