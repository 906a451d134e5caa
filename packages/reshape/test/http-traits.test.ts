import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { memoryStore, STANDARD_TRAITS } from '../src/index.js';
import { serve } from './http-server.js';

describe('the default vocabulary', () => {
  it('serves os-traits as Placement: listed, found, made-up standard names refused', async () => {
    const { call, close } = await serve(memoryStore());
    try {
      const r = await call('GET', '/traits');
      expect(r.body.traits).toEqual(expect.arrayContaining(['HW_CPU_X86_AVX', 'COMPUTE_NODE']));
      expect(r.body.traits).toHaveLength(STANDARD_TRAITS.length);
      expect((await call('GET', '/traits/HW_CPU_X86_AVX')).status).toBe(204);
      expect((await call('GET', '/traits/MISC_SHARES_VIA_AGGREGATE')).status).toBe(204);
      expect((await call('GET', '/traits/HW_CPU_X86_MADE_UP')).status).toBe(404);
      expect((await call('PUT', '/traits/HW_CPU_X86_MADE_UP')).status).toBe(400);
      expect((await call('DELETE', '/traits/HW_CPU_X86_AVX')).status).toBe(400);
      const rp = randomUUID();
      await call('POST', '/resource_providers', { name: 'cn', uuid: rp });
      const put = await call('PUT', `/resource_providers/${rp}/traits`, {
        traits: ['HW_CPU_X86_MADE_UP'],
        resource_provider_generation: 0,
      });
      expect(put.status).toBe(400);
      expect(put.body.errors[0].detail).toBe('No such trait(s): HW_CPU_X86_MADE_UP');
    } finally {
      await close();
    }
  });
});

describe('a store with standard traits', () => {
  it('knows only those and created custom traits, as Placement with os-traits', async () => {
    const { call, close } = await serve(
      memoryStore({ standardTraits: ['HW_CPU_X86_AVX2', 'HW_CPU_X86_SSE'] }),
    );
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
      await close();
    }
  });

  it('deletes custom traits and lists traits by association', async () => {
    const { call, close } = await serve(
      memoryStore({ standardTraits: ['HW_CPU_X86_AVX2', 'HW_CPU_X86_SSE'] }),
    );
    try {
      const rp = randomUUID();
      await call('POST', '/resource_providers', { name: 'cn', uuid: rp });
      expect((await call('PUT', '/traits/CUSTOM_FREE')).status).toBe(201);
      expect((await call('PUT', '/traits/CUSTOM_TAKEN')).status).toBe(201);
      await call('PUT', `/resource_providers/${rp}/traits`, {
        traits: ['CUSTOM_TAKEN', 'HW_CPU_X86_SSE'],
        resource_provider_generation: 0,
      });

      expect((await call('GET', '/traits?associated=true')).body.traits).toEqual([
        'CUSTOM_TAKEN',
        'HW_CPU_X86_SSE',
      ]);
      expect((await call('GET', '/traits?associated=FALSE')).body.traits).toEqual([
        'CUSTOM_FREE',
        'HW_CPU_X86_AVX2',
      ]);
      expect(
        (await call('GET', '/traits?associated=false&name=startswith:CUSTOM_')).body.traits,
      ).toEqual(['CUSTOM_FREE']);
      let r = await call('GET', '/traits?associated=yes');
      expect(r.status).toBe(400);
      expect(r.body.errors[0].detail).toBe(
        'The query parameter "associated" only accepts "true" or "false"',
      );

      r = await call('DELETE', '/traits/CUSTOM_TAKEN');
      expect(r.status).toBe(409);
      expect(r.body.errors[0].detail).toBe(
        'The trait CUSTOM_TAKEN is in use by a resource provider.',
      );
      r = await call('DELETE', '/traits/HW_CPU_X86_AVX2');
      expect(r.status).toBe(400);
      expect(r.body.errors[0].detail).toBe('Cannot delete standard trait HW_CPU_X86_AVX2.');
      expect((await call('DELETE', '/traits/CUSTOM_NEVER')).status).toBe(404);
      expect((await call('DELETE', '/traits/HW_NOT_STANDARD')).status).toBe(404);
      r = await call('DELETE', '/traits/CUSTOM_FREE');
      expect(r).toEqual({ status: 204, body: undefined });
      expect((await call('GET', '/traits/CUSTOM_FREE')).status).toBe(404);
      expect((await call('GET', '/traits')).body.traits).toEqual([
        'CUSTOM_TAKEN',
        'HW_CPU_X86_AVX2',
        'HW_CPU_X86_SSE',
      ]);
    } finally {
      await close();
    }
  });
});
