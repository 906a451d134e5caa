import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { serve } from './http-server.js';

let server: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  server = await serve(memoryStore());
});
afterAll(async () => {
  await server.close();
});

/** The uuids `GET /resource_providers?{query}` lists at `version`, sorted; throws unless 200. */
async function listed(query: string, version = '1.39'): Promise<string[]> {
  const r = await server.call('GET', `/resource_providers?${query}`, undefined, undefined, version);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return (r.body.resource_providers as { uuid: string }[]).map((p) => p.uuid).sort();
}

/** The 400 detail `GET /resource_providers?{query}` answers at `version`. */
async function refused(query: string, version = '1.39'): Promise<string> {
  const r = await server.call('GET', `/resource_providers?${query}`, undefined, undefined, version);
  expect(r.status).toBe(400);
  return r.body.errors[0].detail as string;
}

describe('GET /resource_providers?member_of', () => {
  it('filters by aggregates per microversion, as Placement', async () => {
    const { call } = server;
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    const [inA, inAB, inC] = [randomUUID(), randomUUID(), randomUUID()];
    for (const [uuid, aggregates] of [
      [inA, [a]],
      [inAB, [a, b]],
      [inC, [c]],
    ] as const) {
      await call('POST', '/resource_providers', { name: `rp-${uuid}`, uuid });
      await call('PUT', `/resource_providers/${uuid}/aggregates`, aggregates, undefined, '1.1');
    }

    expect(await listed(`member_of=${a}`, '1.3')).toEqual([inA, inAB].sort());
    expect(await listed(`member_of=in:${b},${c}`, '1.3')).toEqual([inAB, inC].sort());
    expect(await listed(`member_of=in:${randomUUID()}`)).toEqual([]);
    expect(await listed(`member_of=${a}&member_of=${b}`, '1.24')).toEqual([inAB]);
    expect(await listed(`member_of=${a}&member_of=in:${b},${c}`)).toEqual([inAB]);
    expect(await listed(`member_of=!${b}&member_of=in:${a},${c}`, '1.32')).toEqual(
      [inA, inC].sort(),
    );
    expect(await listed(`member_of=!in:${a},${c}&member_of=${b}`)).toEqual([]);
    expect(await listed(`member_of=${a}&name=rp-${inA}`)).toEqual([inA]);

    expect(await refused(`member_of=${a}`, '1.2')).toMatch(/member_of/);
    expect(await refused(`member_of=${a}&member_of=${b}`, '1.23')).toBe(
      'Multiple member_of parameters are not supported',
    );
    expect(await refused(`member_of=!${a}`, '1.31')).toBe(
      'Forbidden member_of parameters are not supported in the specified microversion',
    );
    expect(await refused(`member_of=${a},${b}`)).toBe(
      `Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: ${a},${b}`,
    );
    expect(await refused(`member_of=in:${a},!${b}`)).toBe(
      `Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: !${b}`,
    );
    expect(await refused('member_of=not-a-uuid')).toMatch(/valid UUID\(s\)\. Got: not-a-uuid$/);
  });
});
