// minicloud's /placement next to OpenStack Placement itself (Debian's python3-placement, noauth2,
// run by packages/reshape/bench/placement_server.py): the same statuses without a token, with a
// non-admin token and with an admin token, and the same 403 error body. Skipped with a message
// when python3-placement is not installed, failing instead under CI=true.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, IN_CI } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, killServes, startServe, type Served } from './dashboard-serve.js';

const PYTHON = '/usr/bin/python3';
const script = fileURLToPath(
  new URL('../../../packages/reshape/bench/placement_server.py', import.meta.url),
);
const havePlacement = (() => {
  try {
    execFileSync(PYTHON, ['-c', 'import placement.wsgi'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!havePlacement) {
  if (IN_CI) throw new Error('python3-placement is not installed');
  console.warn('skipping the Placement comparison: python3-placement is not installed');
}

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-placement-auth-'));
const ADMIN = 'placement-compare-admin-token';

describe.skipIf(!havePlacement)('/placement authentication next to OpenStack Placement', () => {
  let placement: ChildProcess;
  let placementUrl: string;
  let served: Served;
  let reader: string;

  beforeAll(async () => {
    const port = await freePort();
    placement = spawn(PYTHON, [script, join(tmp, 'placement'), String(port)], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('placement did not start')), 60_000);
      placement.stdout!.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('listening')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    placementUrl = `http://127.0.0.1:${port}`;
    mkdirSync(join(tmp, 'serve'));
    reader = createToken(join(tmp, 'serve'), tmp, 'reader');
    served = await startServe(join(tmp, 'serve'), tmp, [], { MINICLOUD_ADMIN_TOKEN: ADMIN });
  }, 120_000);

  afterAll(() => {
    placement?.kill('SIGKILL');
    killServes();
    rmSync(tmp, { recursive: true, force: true });
  });

  const get = (base: string, token?: string) =>
    fetch(`${base}/resource_providers`, {
      headers: {
        'openstack-api-version': 'placement 1.23',
        ...(token ? { 'x-auth-token': token } : {}),
      },
    });

  it('answers 401 without a token, 403 to a non-admin and 200 to an admin, as Placement does', async () => {
    const ours = `${served.url}/placement`;
    // noauth2: any token is a user, `admin` is the admin.
    const cases: [string | undefined, string | undefined][] = [
      [undefined, undefined],
      ['user', reader],
      ['admin', ADMIN],
    ];
    for (const [theirs, mine] of cases) {
      const [a, b] = await Promise.all([get(placementUrl, theirs), get(ours, mine)]);
      expect(b.status, `token ${theirs ?? 'none'}`).toBe(a.status);
      const [ja, jb] = (await Promise.all([a.json(), b.json()])) as [any, any];
      if (a.status === 403) {
        const [ea, eb] = [ja.errors[0], jb.errors[0]];
        expect(Object.keys(eb).sort()).toEqual(Object.keys(ea).sort());
        expect({ status: eb.status, title: eb.title, code: eb.code }).toEqual({
          status: ea.status,
          title: ea.title,
          code: ea.code,
        });
        expect(eb.detail).toMatch(/Policy does not allow/);
      } else if (a.status === 401) {
        // Placement's 401 comes from its auth middleware ({ message, code, title }), and so does ours.
        expect(Object.keys(jb).sort()).toEqual(Object.keys(ja).sort());
        expect({ code: jb.code, title: jb.title }).toEqual({ code: ja.code, title: ja.title });
      } else {
        expect(Object.keys(jb)).toEqual(Object.keys(ja));
      }
    }
    // The version document is open on both.
    const [ra, rb] = await Promise.all([fetch(`${placementUrl}/`), fetch(`${ours}/`)]);
    expect([ra.status, rb.status]).toEqual([200, 200]);
  }, 60_000);
});
