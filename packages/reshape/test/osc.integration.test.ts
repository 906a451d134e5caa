// Runs the real OpenStack CLI (python3-openstackclient + python3-osc-placement) against our
// server. Not available in CI unless those Debian packages are installed; skipped otherwise.
import { execFile } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { createPlacementServer } from '../src/http.js';

const run = promisify(execFile);
const cli = await run('openstack', ['--version']).then(
  () => true,
  () => false,
);
if (!cli)
  console.warn(
    'skipping the OpenStack CLI test: `openstack` is not installed (apt-get install python3-openstackclient python3-osc-placement)',
  );

describe.skipIf(!cli)('openstack resource provider … against our server', () => {
  const store = memoryStore();
  const server = createPlacementServer(store, { auth: { token: 'secret' } });
  let args: string[] = [];
  const uuid = '0b1d4a5e-6f00-4c1a-9a6e-1c2d3e4f5a6b';
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    args = [
      '--os-auth-type',
      'admin_token',
      '--os-endpoint',
      `http://127.0.0.1:${port}`,
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
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });
  const osc = async (...cmd: string[]) =>
    JSON.parse((await run('openstack', [...cmd, ...args])).stdout) as unknown;

  it('lists, shows and lists inventory', { timeout: 60_000 }, async () => {
    expect(await osc('resource', 'provider', 'list')).toEqual([
      expect.objectContaining({ uuid, name: 'cn1', generation: 1 }),
    ]);
    expect(await osc('resource', 'provider', 'show', uuid)).toMatchObject({ uuid, name: 'cn1' });
    expect(await osc('resource', 'provider', 'inventory', 'list', uuid)).toEqual([
      expect.objectContaining({ resource_class: 'VCPU', total: 8, allocation_ratio: 4 }),
    ]);
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
