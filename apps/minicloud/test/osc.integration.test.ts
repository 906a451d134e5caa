// The real OpenStack CLI (Debian's python3-openstackclient + python3-osc-placement) against a
// `minicloud serve` process's /placement with tokens: the admin token lists the providers (the
// compute node's tree and one created through the API), a reader token's write is refused with
// 403 and changes nothing. Skipped with a message when `openstack` is not installed, failing
// instead under CI=true.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { IN_CI } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, killServes, startServe, type Served } from './dashboard-serve.js';

const run = promisify(execFile);
const haveCli = await run('openstack', ['--version']).then(
  () => true,
  () => false,
);
if (!haveCli) {
  const install = 'apt-get install python3-openstackclient python3-osc-placement';
  if (IN_CI) throw new Error(`the openstack CLI is not installed (${install})`);
  console.warn(`skipping the OpenStack CLI test: \`openstack\` is not installed (${install})`);
}

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-osc-'));
const ADMIN = 'osc-test-admin-token';
const RP_UUID = '5d0c0000-0000-4000-8000-00000000000a';

describe.skipIf(!haveCli)('openstack resource provider … against minicloud serve', () => {
  let served: Served;
  let reader: string;

  beforeAll(async () => {
    mkdirSync(join(tmp, 'serve'));
    reader = createToken(join(tmp, 'serve'), tmp, 'reader');
    served = await startServe(join(tmp, 'serve'), tmp, [], { MINICLOUD_ADMIN_TOKEN: ADMIN });
  }, 120_000);

  afterAll(() => {
    killServes();
    rmSync(tmp, { recursive: true, force: true });
  });

  /** Runs `openstack <cmd> -f json` against the server's /placement with `token`. */
  const osc = (token: string, ...cmd: string[]) =>
    run('openstack', [
      ...cmd,
      '--os-auth-type',
      'admin_token',
      '--os-endpoint',
      `${served.url}/placement`,
      '--os-token',
      token,
      '-f',
      'json',
    ]);

  it('lists a provider created through the API, with the admin token', async () => {
    const created = await fetch(`${served.url}/placement/resource_providers`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-auth-token': ADMIN,
        'openstack-api-version': 'placement 1.20',
      },
      body: JSON.stringify({ name: 'osc-made', uuid: RP_UUID }),
    });
    expect(created.status).toBe(200);
    const listed = JSON.parse((await osc(ADMIN, 'resource', 'provider', 'list')).stdout) as {
      uuid: string;
      name: string;
    }[];
    expect(listed).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ uuid: RP_UUID, name: 'osc-made', generation: 0 }),
        expect.objectContaining({ name: 'node-1', parent_provider_uuid: null }),
        expect.objectContaining({ name: 'node-1_pgpu0' }),
      ]),
    );
  }, 60_000);

  it("refuses a reader token's write with 403 and creates nothing", async () => {
    const refused = await osc(reader, 'resource', 'provider', 'create', 'osc-by-reader').then(
      () => undefined,
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(refused?.code).toBe(1);
    expect(refused?.stderr).toMatch(/Policy does not allow this action.*\(HTTP 403\)/);
    const listed = JSON.parse((await osc(ADMIN, 'resource', 'provider', 'list')).stdout) as {
      name: string;
    }[];
    expect(listed.map((p) => p.name)).not.toContain('osc-by-reader');
  }, 60_000);
});
