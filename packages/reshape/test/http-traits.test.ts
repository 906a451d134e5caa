import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';

describe('a store with standard traits', () => {
  it('knows only those and created custom traits, as Placement with os-traits', async () => {
    const srv = createPlacementServer(
      memoryStore({ standardTraits: ['HW_CPU_X86_AVX2', 'HW_CPU_X86_SSE'] }),
    );
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    const call = async (method: string, path: string, body?: unknown, accept?: string) => {
      const res = await fetch(url + path, {
        method,
        headers: {
          'openstack-api-version': 'placement 1.39',
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(accept === undefined ? {} : { accept }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? (JSON.parse(text) as any) : undefined };
    };
    try {
      const rp = randomUUID();
      expect((await call('POST', '/resource_providers', { name: 'cn', uuid: rp })).status).toBe(
        200,
      );
      expect((await call('PUT', '/traits/CUSTOM_GOLD')).status).toBe(201);
      expect((await call('GET', '/traits')).body.traits).toEqual([
        'CUSTOM_GOLD',
        'HW_CPU_X86_AVX2',
        'HW_CPU_X86_SSE',
      ]);

      let r = await call('PUT', `/resource_providers/${rp}/traits`, {
        traits: ['HW_CPU_X86_SSE', 'NON_EXISTED_TRAIT1', 'NON_EXISTED_TRAIT2', 'CUSTOM_GOLD'],
        resource_provider_generation: 0,
      });
      expect(r.status).toBe(400);
      expect(r.body.errors[0].detail).toBe(
        'No such trait(s): NON_EXISTED_TRAIT1, NON_EXISTED_TRAIT2',
      );
      r = await call('GET', `/resource_providers/${rp}/traits`);
      expect(r.body).toEqual({ traits: [], resource_provider_generation: 0 });
      r = await call('PUT', `/resource_providers/${rp}/traits`, {
        traits: ['HW_CPU_X86_SSE', 'CUSTOM_GOLD'],
        resource_provider_generation: 0,
      });
      expect(r.body).toEqual({
        traits: ['CUSTOM_GOLD', 'HW_CPU_X86_SSE'],
        resource_provider_generation: 1,
      });

      // GET /traits/{name} answers no body, so it takes any accept header (Placement's get_trait).
      expect((await call('GET', '/traits/HW_CPU_X86_AVX2', undefined, 'text/plain')).status).toBe(
        204,
      );
      expect((await call('GET', '/traits/MADE_UP', undefined, 'text/plain')).status).toBe(404);
      expect((await call('GET', '/traits', undefined, 'text/plain')).status).toBe(406);
    } finally {
      await new Promise((resolve) => srv.close(resolve));
    }
  });
});
