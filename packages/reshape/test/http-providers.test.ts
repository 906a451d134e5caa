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

describe('GET /resource_providers?required&resources', () => {
  it('filters by traits and by room for resources per microversion, as Placement', async () => {
    const { call } = server;
    const [fast, slow] = [randomUUID(), randomUUID()];
    expect((await call('PUT', '/traits/CUSTOM_FAST')).status).toBe(201);
    for (const [uuid, traits, vcpu] of [
      [fast, ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'], 8],
      [slow, ['HW_CPU_X86_AVX2'], 2],
    ] as const) {
      await call('POST', '/resource_providers', { name: `rp-${uuid}`, uuid });
      await call('PUT', `/resource_providers/${uuid}/inventories`, {
        resource_provider_generation: 0,
        inventories: { VCPU: { total: vcpu }, DISK_GB: { total: 100, step_size: 10 } },
      });
      await call('PUT', `/resource_providers/${uuid}/traits`, {
        traits,
        resource_provider_generation: 1,
      });
    }
    const both: string[] = [fast, slow].sort();
    const ours = async (query: string, version?: string) =>
      (await listed(query, version)).filter((u) => both.includes(u));

    expect(await ours('required=HW_CPU_X86_AVX2', '1.18')).toEqual(both);
    expect(await ours('required=HW_CPU_X86_AVX2,CUSTOM_FAST', '1.18')).toEqual([fast]);
    expect(await ours('required=HW_CPU_X86_AVX2,!CUSTOM_FAST', '1.22')).toEqual([slow]);
    expect(await ours('required=in:CUSTOM_FAST,HW_CPU_X86_SSE')).toEqual([fast]);
    expect(await ours('required=HW_CPU_X86_AVX2&required=!CUSTOM_FAST')).toEqual([slow]);
    // Before 1.39 only the last `required` counts.
    expect(await ours('required=CUSTOM_FAST&required=HW_CPU_X86_AVX2', '1.38')).toEqual(both);

    expect(await ours('resources=VCPU:4', '1.4')).toEqual([fast]);
    expect(await ours('resources=VCPU:2,DISK_GB:20')).toEqual(both);
    expect(await ours('resources=DISK_GB:25')).toEqual([]);
    expect(await ours('resources=VCPU:1&required=!CUSTOM_FAST')).toEqual([slow]);
    const put = await call('PUT', `/allocations/${randomUUID()}`, {
      allocations: { [fast]: { resources: { VCPU: 6 } } },
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
      consumer_type: 'INSTANCE',
    });
    expect(put.status, JSON.stringify(put.body)).toBe(204);
    expect(await ours('resources=VCPU:2')).toEqual(both);
    expect(await ours('resources=VCPU:3')).toEqual([]);

    expect(await refused('required=CUSTOM_FAST', '1.17')).toMatch(/required/);
    expect(await refused('resources=VCPU:1', '1.3')).toMatch(/resources/);
    expect(await refused('required=')).toBe(
      "Invalid query string parameters: Expected 'required' parameter value of the form: HW_CPU_X86_VMX,!CUSTOM_MAGIC. Got an empty trait in: ",
    );
    expect(await refused('required=!CUSTOM_FAST', '1.21')).toBe(
      "Invalid query string parameters: Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: !CUSTOM_FAST",
    );
    expect(await refused('required=in:CUSTOM_FAST,HW_CPU_X86_SSE', '1.38')).toMatch(
      /only supported since microversion 1\.39/,
    );
    expect(await refused('required=in:CUSTOM_FAST,!HW_CPU_X86_SSE')).toMatch(
      /does not support forbidden traits/,
    );
    expect(await refused('required=CUSTOM_SLOW,!CUSTOM_NONE')).toBe(
      'Invalid trait(s) in "required" parameter: No such trait(s): CUSTOM_SLOW, CUSTOM_NONE.',
    );
    expect(await refused('resources=CUSTOM_GOLD:1')).toBe(
      'Invalid resource class in resources parameter: No such resource class CUSTOM_GOLD.',
    );
    // Placement's two messages: not an integer, then not at least 1.
    expect(await refused('resources=VCPU:0')).toBe(
      'Requested resource VCPU requires amount >= 1. Got: 0.',
    );
    expect(await refused('resources=VCPU:-2')).toBe(
      'Requested resource VCPU requires amount >= 1. Got: -2.',
    );
    expect(await refused('resources=VCPU:fred')).toBe(
      'Requested resource VCPU expected positive integer amount. Got: fred.',
    );
    expect(await refused('resources=VCPU')).toMatch(/^Badly formed resources parameter/);
  });
});
