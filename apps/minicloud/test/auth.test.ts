// Authentication of a real `minicloud serve` process: every route of the OpenAPI document
// without a token, with a wrong one and with each role; Placement's 401/403; the dashboard's
// session cookie; revocation; refusal to listen in the open without tokens; rate limiting of
// clients that keep failing. Tokens are created with the CLI, as a user would.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanEnv, cli, killServes, startServe, type Served } from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-auth-'));
const ADMIN_ENV = 'env-admin-token-for-the-auth-test';
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

function minicloud(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cli, ...args],
      { cwd: tmp, env: { ...cleanEnv(), ...env } },
      (e, stdout, stderr) => resolve({ code: e ? Number(e.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function createToken(db: string, role: string, name?: string): Promise<string> {
  const r = await minicloud([
    'token',
    'create',
    '--role',
    role,
    ...(name ? ['--name', name] : []),
    '--database',
    db,
  ]);
  expect(r.code, r.stderr).toBe(0);
  return r.stdout.split('\n')[0]!;
}

type Role = 'admin' | 'member' | 'reader';
type Access = 'public' | 'read' | 'deploy' | 'admin';

/** What each route of the API needs; a route missing here fails the table test. */
const ACCESS: Record<string, Access> = {
  'GET /api/openapi.json': 'read',
  'GET /api/health': 'public',
  'GET /api/session': 'public',
  'POST /api/session': 'public',
  'DELETE /api/session': 'public',
  'GET /api/environments': 'read',
  'GET /api/environments/{name}': 'read',
  'POST /api/environments': 'deploy',
  'DELETE /api/environments/{name}': 'deploy',
  'POST /api/packages': 'admin',
  'POST /api/packages/{fqn}/{version}/archive': 'admin',
  'GET /api/packages/{fqn}/{version}': 'read',
  'GET /api/containers': 'read',
  'POST /api/containers/{name}/ops': 'deploy',
  'GET /api/ops/{id}': 'read',
  'GET /api/queues': 'read',
  'GET /api/queues/{key}': 'read',
  'POST /api/queues/{key}/resume': 'deploy',
  'POST /api/queues/{key}/discard': 'deploy',
  'GET /api/flows': 'read',
  'GET /api/flows/{id}': 'read',
  'GET /api/providers': 'read',
  'POST /api/demo': 'admin',
  'GET /api/events': 'read',
  'GET /metrics': 'read',
};

const GRANTS: Record<Role, Access[]> = {
  admin: ['public', 'read', 'deploy', 'admin'],
  member: ['public', 'read', 'deploy'],
  reader: ['public', 'read'],
};

/**
 * Calls a route with `headers`; bodies are malformed JSON, so an authorised call is refused by
 * the body parser (400) and changes nothing. Resolves with the status (streams are cut).
 */
async function call(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
): Promise<number> {
  const url = base + path.replace(/\{[a-z]+\}/g, 'nope');
  const withBody = method === 'POST';
  const ac = new AbortController();
  const res = await fetch(url, {
    method,
    signal: ac.signal,
    headers: { ...headers, ...(withBody ? { 'content-type': 'application/json' } : {}) },
    ...(withBody ? { body: '{' } : {}),
  });
  ac.abort();
  return res.status;
}

describe('minicloud serve with tokens', () => {
  const db = `sqlite:${join(tmp, 'main', 'mc.db')}`;
  const tokens = {} as Record<Role, string>;
  let s: Served;
  beforeAll(async () => {
    mkdirSync(join(tmp, 'main'));
    tokens.admin = await createToken(db, 'admin', 'ops');
    tokens.member = await createToken(db, 'member');
    tokens.reader = await createToken(db, 'reader', 'wall screen');
    // The table test fails many times on purpose: the rate limit is tested on another server.
    s = await startServe(join(tmp, 'main'), tmp, [], { MINICLOUD_AUTH_MAX_FAILURES: '1000' });
  }, 120_000);

  it('stores only hashes and lists tokens without their secrets', async () => {
    const list = await minicloud(['token', 'list', '--database', db]);
    expect(list.code).toBe(0);
    const lines = list.stdout.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^[0-9a-f]{12} {2}admin +\S+Z {2}ops$/);
    expect(lines[2]).toMatch(/reader.*wall screen$/);
    const file = readFileSync(join(tmp, 'main', 'mc.db')).toString('latin1');
    for (const t of Object.values(tokens)) {
      expect(t).toMatch(/^mct_[A-Za-z0-9_-]{43}$/);
      expect(list.stdout).not.toContain(t);
      expect(file).not.toContain(t);
    }
    expect(s.stdout()).not.toContain('mct_');
  });

  it('answers every documented route by role: 401 without or with a wrong token, 403 above the role', async () => {
    const doc = (await (
      await fetch(`${s.url}/api/openapi.json`, {
        headers: { authorization: `Bearer ${tokens.reader}` },
      })
    ).json()) as { paths: Record<string, Record<string, unknown>> };
    const routes = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
    );
    expect(routes.sort()).toEqual(Object.keys(ACCESS).sort());
    for (const route of routes) {
      const [method, path] = route.split(' ') as [string, string];
      const access = ACCESS[route]!;
      const anonymous = await call(s.url, method, path, {});
      const wrong = await call(s.url, method, path, { authorization: 'Bearer mct_wrong' });
      if (access === 'public') {
        if (path !== '/api/session') expect([anonymous, wrong], route).not.toContain(401);
      } else {
        expect([anonymous, wrong], route).toEqual([401, 401]);
      }
      for (const role of ['admin', 'member', 'reader'] as const) {
        const status = await call(s.url, method, path, { authorization: `Bearer ${tokens[role]}` });
        if (GRANTS[role].includes(access))
          expect([401, 403], `${route} ${role}`).not.toContain(status);
        else expect(status, `${route} ${role}`).toBe(403);
      }
    }
  }, 60_000);

  it('refuses Placement calls with its own 401/403 bodies and lets admins through', async () => {
    const root = await fetch(`${s.url}/placement/`);
    expect(root.status).toBe(200);
    const get = (token?: string) =>
      fetch(`${s.url}/placement/resource_providers`, {
        headers: {
          'openstack-api-version': 'placement 1.23',
          ...(token ? { 'x-auth-token': token } : {}),
        },
      });
    const none = await get();
    expect(none.status).toBe(401);
    expect(await none.json()).toMatchObject({ code: '401 Unauthorized', title: 'Unauthorized' });
    expect((await get('wrong')).status).toBe(401);
    expect((await get(tokens.reader)).status).toBe(403);
    expect((await get(tokens.member)).status).toBe(403);
    const ok = await get(tokens.admin);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toHaveProperty('resource_providers');
  });

  it('signs the dashboard in with an HttpOnly SameSite=Strict cookie that opens the event stream', async () => {
    expect((await fetch(`${s.url}/api/session`)).status).toBe(401);
    const bad = await fetch(`${s.url}/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: 'mct_not-a-token' }),
    });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();
    const signIn = await fetch(`${s.url}/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: tokens.reader }),
    });
    expect(signIn.status).toBe(200);
    expect(await signIn.json()).toEqual({ auth: true, role: 'reader' });
    const cookie = signIn.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(cookie).not.toMatch(/Secure/);
    // Behind a TLS proxy (X-Forwarded-Proto: https) the cookie is Secure, signing out too.
    const proxied = await fetch(`${s.url}/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-proto': 'https' },
      body: JSON.stringify({ token: tokens.reader }),
    });
    expect(proxied.headers.get('set-cookie')).toMatch(/; HttpOnly; SameSite=Strict; Secure;/);
    const out = await fetch(`${s.url}/api/session`, {
      method: 'DELETE',
      headers: {
        cookie: proxied.headers.get('set-cookie')!.split(';')[0]!,
        'x-forwarded-proto': 'https, http',
      },
    });
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie')).toMatch(/; Secure; Max-Age=0/);
    const pair = cookie.split(';')[0]!;
    expect((await fetch(`${s.url}/api/session`, { headers: { cookie: pair } })).status).toBe(200);
    const ac = new AbortController();
    const events = await fetch(`${s.url}/api/events`, {
      headers: { cookie: pair },
      signal: ac.signal,
    });
    expect(events.status).toBe(200);
    expect(events.headers.get('content-type')).toMatch(/text\/event-stream/);
    ac.abort();
    expect((await fetch(`${s.url}/api/events`)).status).toBe(401);
    // A reader's cookie does not allow writes.
    const op = await fetch(`${s.url}/api/queues/x/resume`, {
      method: 'POST',
      headers: { cookie: pair },
    });
    expect(op.status).toBe(403);
  });

  it('accepts MINICLOUD_ADMIN_TOKEN, refuses a revoked token at once and rate-limits failing clients', async () => {
    const dir = join(tmp, 'env');
    mkdirSync(dir);
    const served = await startServe(dir, tmp, [], { MINICLOUD_ADMIN_TOKEN: ADMIN_ENV });
    const envs = (token: string) =>
      fetch(`${served.url}/api/environments`, { headers: { authorization: `Bearer ${token}` } });
    expect((await fetch(`${served.url}/api/environments`)).status).toBe(401);
    expect((await envs(ADMIN_ENV)).status).toBe(200);
    const member = await createToken(`sqlite:${join(dir, 'mc.db')}`, 'member');
    expect((await envs(member)).status).toBe(200);
    const id = (
      await minicloud(['token', 'list', '--database', `sqlite:${join(dir, 'mc.db')}`])
    ).stdout.split(' ')[0]!;
    const revoked = await minicloud([
      'token',
      'revoke',
      id,
      '--database',
      `sqlite:${join(dir, 'mc.db')}`,
    ]);
    expect(revoked.stdout).toBe(`revoked token ${id}\n`);
    expect((await envs(member)).status).toBe(401);
    const again = await minicloud([
      'token',
      'revoke',
      id,
      '--database',
      `sqlite:${join(dir, 'mc.db')}`,
    ]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/minicloud\.token_not_found/);
    // A client that keeps failing gets 429 for its failures; a good token still passes.
    let status = 0;
    let tries = 0;
    while (status !== 429 && tries < 100) {
      tries++;
      status = (
        await fetch(`${served.url}/api/environments`, {
          headers: { authorization: 'Bearer mct_guess' },
        })
      ).status;
    }
    expect(status).toBe(429);
    expect(tries).toBeLessThanOrEqual(21);
    const bad = await fetch(`${served.url}/api/environments`, {
      headers: { authorization: 'Bearer mct_other' },
    });
    expect(bad.status).toBe(429);
    expect(Number(bad.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe(
      'minicloud.rate_limited',
    );
    const good = await fetch(`${served.url}/api/environments`, {
      headers: { authorization: `Bearer ${ADMIN_ENV}` },
    });
    expect(good.status).toBe(200);
    const placement = await fetch(`${served.url}/placement/resource_providers`, {
      headers: { 'x-auth-token': ADMIN_ENV },
    });
    expect(placement.status).toBe(200);
    const placementBad = await fetch(`${served.url}/placement/resource_providers`, {
      headers: { 'x-auth-token': 'mct_guess' },
    });
    expect(placementBad.status).toBe(429);
    served.child.kill('SIGTERM');
    expect((await served.exited).code).toBe(0);
  }, 120_000);
});

describe('minicloud serve on a non-loopback address', () => {
  it('refuses to start without a token, and starts with a warning under --insecure-no-auth', async () => {
    const dir = join(tmp, 'open');
    mkdirSync(dir);
    const db = `sqlite:${join(dir, 'mc.db')}`;
    const refused = await minicloud([
      'serve',
      '--host',
      '0.0.0.0',
      '--port',
      '0',
      '--database',
      db,
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/refusing to listen on 0\.0\.0\.0 without authentication/);
    expect(refused.stderr).toMatch(/\[minicloud\.auth_required\]/);

    const open = await startServe(dir, tmp, ['--host', '0.0.0.0', '--insecure-no-auth']);
    expect(open.stderr()).toMatch(/WARNING: --insecure-no-auth/);
    const port = new URL(open.url).port;
    expect((await fetch(`http://127.0.0.1:${port}/api/environments`)).status).toBe(200);
    open.child.kill('SIGTERM');
    await open.exited;

    const withEnv = await startServe(dir, tmp, ['--host', '0.0.0.0'], {
      MINICLOUD_ADMIN_TOKEN: ADMIN_ENV,
    });
    expect(withEnv.stderr()).toBe('');
    const base = `http://127.0.0.1:${new URL(withEnv.url).port}`;
    expect((await fetch(`${base}/api/environments`)).status).toBe(401);
    expect((await fetch(`${base}/metrics`)).status).toBe(401);
    expect(
      (
        await fetch(`${base}/api/environments`, {
          headers: { authorization: `Bearer ${ADMIN_ENV}` },
        })
      ).status,
    ).toBe(200);
    withEnv.child.kill('SIGTERM');
    expect((await withEnv.exited).code).toBe(0);
  }, 120_000);
});
