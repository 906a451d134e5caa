// Runs the real OpenStack CLI (Debian's python3-openstackclient + python3-osc-placement) against
// our server. Like the Placement comparison (python3-placement), it is skipped with a message when
// the `openstack` command is missing, except under CI (testkit's IN_CI; `.ci/run` installs it):
// there it fails.
import { execFile } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { IN_CI } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';

const run = promisify(execFile);
const cli = await run('openstack', ['--version']).then(
  () => true,
  () => false,
);
if (!cli && IN_CI)
  throw new Error(
    'the OpenStack CLI is not installed (python3-openstackclient, python3-osc-placement)',
  );
if (!cli)
  console.warn(
    'skipping the OpenStack CLI test: `openstack` is not installed (apt-get install python3-openstackclient python3-osc-placement)',
  );

describe.skipIf(!cli)('openstack resource provider … against our server', () => {
  const store = memoryStore();
  // Mounted under a prefix, as minicloud serves it: a relative Location breaks the CLI there.
  const server = createPlacementServer(store, {
    auth: { token: 'secret' },
    basePath: '/placement',
  });
  let args: string[] = [];
  const uuid = '0b1d4a5e-6f00-4c1a-9a6e-1c2d3e4f5a6b';
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    args = [
      '--os-auth-type',
      'admin_token',
      '--os-endpoint',
      `http://127.0.0.1:${port}/placement`,
      '--os-token',
      'secret',
      '-f',
      'json',
    ];
    await store.createProvider({ name: 'cn1', uuid });
    await store.setInventories(uuid, {
      generation: 0,
      inventories: { VCPU: { total: 8, allocationRatio: 4 } },
    });
    await store.setAllocations('7c0a0000-0000-4000-8000-000000000001', {
      projectId: 'demo',
      userId: 'alice',
      allocations: { [uuid]: { VCPU: 2 } },
    });
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });
  const osc = async (...cmd: string[]) =>
    JSON.parse((await run('openstack', [...cmd, ...args])).stdout) as unknown;

  it('creates a provider and reads it back', { timeout: 180_000 }, async () => {
    const created = (await osc('resource', 'provider', 'create', 'made-by-cli')) as {
      uuid: string;
      name: string;
    };
    expect(created).toMatchObject({ name: 'made-by-cli', generation: 0 });
    expect(await osc('resource', 'provider', 'show', created.uuid)).toMatchObject({
      uuid: created.uuid,
      name: 'made-by-cli',
    });
    expect((await store.getProvider(created.uuid))?.name).toBe('made-by-cli');
    const child = (await osc(
      '--os-placement-api-version',
      '1.14',
      'resource',
      'provider',
      'create',
      'child-by-cli',
      '--parent-provider',
      created.uuid,
    )) as { uuid: string };
    expect((await store.getProvider(child.uuid))?.parentProviderUuid).toBe(created.uuid);
  });

  it('lists, shows, lists inventory, usages and aggregates', { timeout: 180_000 }, async () => {
    expect(await osc('resource', 'provider', 'list')).toEqual(
      expect.arrayContaining([expect.objectContaining({ uuid, name: 'cn1', generation: 2 })]),
    );
    expect(await osc('resource', 'provider', 'show', uuid)).toMatchObject({ uuid, name: 'cn1' });
    expect(await osc('resource', 'provider', 'inventory', 'list', uuid)).toEqual([
      expect.objectContaining({ resource_class: 'VCPU', total: 8, allocation_ratio: 4 }),
    ]);
    expect(await osc('resource', 'provider', 'usage', 'show', uuid)).toEqual([
      { resource_class: 'VCPU', usage: 2 },
    ]);
    // Microversion-dependent commands: aggregates (1.19), project usages (1.9).
    const agg = '5a1e0000-0000-4000-8000-000000000001';
    await osc(
      '--os-placement-api-version',
      '1.19',
      'resource',
      'provider',
      'aggregate',
      'set',
      uuid,
      '--aggregate',
      agg,
      '--generation',
      String((await store.getProvider(uuid))!.generation),
    );
    expect(
      await osc(
        '--os-placement-api-version',
        '1.19',
        'resource',
        'provider',
        'aggregate',
        'list',
        uuid,
      ),
    ).toEqual([{ uuid: agg }]);
    expect(
      await osc('--os-placement-api-version', '1.9', 'resource', 'usage', 'show', 'demo'),
    ).toEqual([{ resource_class: 'VCPU', usage: 2 }]);
    await expect(
      run('openstack', [
        'resource',
        'provider',
        'list',
        ...args.map((a) => (a === 'secret' ? 'wrong' : a)),
      ]),
    ).rejects.toThrow();
  });
});
