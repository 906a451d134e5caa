// A hostile web page and a hostile client against a real `minicloud serve` process, in loopback
// "auto" mode (no token) and with tokens: DNS rebinding (foreign Host), CSRF (cross-site Origin,
// Sec-Fetch-Site, text/plain forms), framing, lockout through the failure limiter, revoking the
// last token, oversize Placement bodies, stacks and paths in answers, error shapes of the HTTP
// parser and the router, slow headers, sessions. Each attack asserts the refusal code and that
// nothing changed (state read back, files on disk counted).
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
} from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32, deflateRawSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP, appFiles } from '../src/steps/deploy.js';
import { tar } from './archives.js';
import {
  cleanEnv,
  cli,
  createToken,
  killServes,
  startServe,
  type Served,
} from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-hostile-'));
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

const EVIL = 'http://evil.example';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: { error?: { code?: string; message?: string; requestId?: string } } & Record<
    string,
    unknown
  >;
}

/** One request with exactly the headers given (Host included), through `node:http`. */
function raw(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string | Buffer,
  /** The client's own address (another loopback address: another client). */
  localAddress?: string,
): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: {
          host: url.host,
          ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
          ...headers,
        },
        agent: false,
        ...(localAddress ? { localAddress } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: Answer['json'] = {};
          try {
            json = JSON.parse(text) as Answer['json'];
          } catch {
            // not JSON: the assertions say so
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** Opens a request whose answer is not read to its end (an event stream); `close` ends it. */
/** Uploads the demo application's package (JSON, base64 files) with `headers`. */
function uploadApp(url: string, headers: Record<string, string>) {
  const files = appFiles(1).map((f) => ({
    path: f.path,
    base64: Buffer.from(f.content).toString('base64'),
  }));
  return raw(
    url,
    'POST',
    '/api/packages',
    { ...headers, 'content-type': 'application/json' },
    JSON.stringify({ ...APP, files }),
  );
}

function hold(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; close: () => void }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path, headers, agent: false },
      (res) => {
        res.on('data', () => undefined);
        res.on('error', () => undefined);
        resolve({ status: res.statusCode ?? 0, close: () => req.destroy() });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** Files and directories under `dir`, recursively (0 when it does not exist). */
function countEntries(dir: string): number {
  if (!existsSync(dir)) return 0;
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    n += 1;
    if (e.isDirectory()) n += countEntries(join(dir, e.name));
  }
  return n;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What a zip's headers may say instead of the truth. */
interface Lie {
  crc?: number;
  /** The uncompressed size in both headers. */
  size?: number;
}

/** A zip of one deflated file `lib/a.txt` whose headers say what `lie` says. */
function lyingZip(lie: Lie): Buffer {
  const name = Buffer.from('lib/a.txt');
  const raw = Buffer.from('hello, package\n'.repeat(200));
  const body = deflateRawSync(raw);
  const crc = (lie.crc ?? crc32(raw)) >>> 0;
  const size = lie.size ?? raw.length;
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(8, 8);
  local.writeUInt32LE(crc, 14);
  local.writeUInt32LE(body.length, 18);
  local.writeUInt32LE(size, 22);
  local.writeUInt16LE(name.length, 26);
  // The central header repeats the local one's fields, after a "version made by" (Unix).
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0);
  central.writeUInt16LE((3 << 8) | 20, 4);
  local.copy(central, 6, 4, 30);
  central.writeUInt32LE((0o100644 << 16) >>> 0, 38);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(1, 8);
  end.writeUInt16LE(1, 10);
  end.writeUInt32LE(46 + name.length, 12);
  end.writeUInt32LE(30 + name.length + body.length, 16);
  return Buffer.concat([local, name, body, central, name, end]);
}

/** The TCP ports process `pid` listens on (Linux: its sockets in /proc). */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const table of ['tcp', 'tcp6']) {
    const lines = readFileSync(`/proc/${pid}/net/${table}`, 'utf8').split('\n').slice(1);
    for (const fields of lines.map((l) => l.trim().split(/\s+/))) {
      if (fields[3] === '0A' && inodes.has(fields[9]!)) {
        ports.push(parseInt(fields[1]!.split(':')[1]!, 16));
      }
    }
  }
  return ports;
}

for (const mode of ['auto', 'tokens'] as const) {
  describe(`a hostile client against minicloud serve (${mode})`, () => {
    const dir = join(tmp, mode);
    let served: Served;
    let admin = '';
    let reader = '';
    /** Headers a legitimate client of this mode sends. */
    let auth: Record<string, string> = {};
    const db = `sqlite:${join(dir, 'mc.db')}`;

    beforeAll(async () => {
      mkdirSync(dir, { recursive: true });
      if (mode === 'tokens') {
        admin = createToken(dir, tmp, 'admin');
        reader = createToken(dir, tmp, 'reader');
        auth = { authorization: `Bearer ${admin}` };
      }
      served = await startServe(dir, tmp, [
        '--data-dir',
        dir,
        '--allowed-host',
        'ops.example',
        '--allowed-origin',
        'https://ops.example',
        ...(mode === 'tokens' ? ['--secure-cookies'] : []),
      ]);
    }, 90_000);

    const state = async () => {
      const [containers, flows, health] = await Promise.all(
        ['/api/containers', '/api/flows', '/api/health'].map((p) =>
          raw(served.url, 'GET', p, auth),
        ),
      );
      return {
        containers: containers!.json.containers,
        flows: flows!.json.flows,
        demoRunning: health!.json.demoRunning,
        files: countEntries(join(dir, 'uploads')),
      };
    };

    it('DNS rebinding: a foreign Host is refused on every listener path (421), nothing changes', async () => {
      const before = await state();
      const port = new URL(served.url).port;
      const host = `evil.example:${port}`;
      const attacks: [string, string, string?][] = [
        ['POST', '/api/containers/k/ops', '{"type":"create","payload":{"image":"x"}}'],
        ['POST', '/api/demo'],
        ['GET', '/api/environments'],
        ['GET', '/api/session'],
        ['GET', '/api/health'],
        ['GET', '/api/events'],
        ['GET', '/placement/resource_providers'],
        ['POST', '/placement/resource_providers', '{"name":"evil"}'],
        ['GET', '/'],
        ['GET', '/no-such-file.js'],
      ];
      for (const [method, path, body] of attacks) {
        const r = await raw(
          served.url,
          method,
          path,
          {
            ...auth,
            host,
            origin: `http://${host}`,
            ...(body ? { 'content-type': 'application/json' } : {}),
          },
          body,
        );
        expect({ path, status: r.status, code: r.json.error?.code }).toEqual({
          path,
          status: 421,
          code: 'minicloud.host_not_allowed',
        });
      }
      // no Host at all (HTTP/1.0), and a host with a trailing junk
      expect(
        (await raw(served.url, 'GET', '/api/health', { host: `127.0.0.1.evil.example:${port}` }))
          .status,
      ).toBe(421);
      expect(await state()).toEqual(before);
      // The names of this machine are accepted.
      for (const name of ['localhost', '127.0.0.1']) {
        const ok = await raw(served.url, 'GET', '/api/health', { host: `${name}:${port}` });
        expect(ok.status).toBe(200);
      }
    });

    it('CSRF: a cross-site Origin or Sec-Fetch-Site is refused on every non-GET request (403), with or without credentials', async () => {
      const before = await state();
      let cookie = '';
      if (mode === 'tokens') {
        const signIn = await raw(
          served.url,
          'POST',
          '/api/session',
          { 'content-type': 'application/json' },
          JSON.stringify({ token: admin }),
        );
        expect(signIn.status).toBe(200);
        const setCookie = String(signIn.headers['set-cookie']);
        cookie = setCookie.split(';')[0]!;
        // HttpOnly, SameSite=Strict, and Secure when served over TLS (--secure-cookies)
        expect(setCookie).toMatch(/; HttpOnly; SameSite=Strict; Secure;/);
        // the cookie holds a session, not the token
        expect(cookie).not.toContain(admin);
      }
      const credentials: Record<string, string> = cookie ? { cookie } : {};
      const port = new URL(served.url).port;
      const attacks: [string, Record<string, string>][] = [
        ['/api/demo', { origin: EVIL, 'content-type': 'text/plain' }],
        ['/api/queues/k/discard', { origin: EVIL, 'content-type': 'text/plain' }],
        ['/api/queues/k/resume', { origin: EVIL }],
        ['/api/containers/k/ops', { origin: EVIL, 'content-type': 'application/json' }],
        // another port of this machine is same-site, not same-origin
        ['/api/demo', { origin: 'http://127.0.0.1:1', 'sec-fetch-site': 'same-site' }],
        ['/api/demo', { 'sec-fetch-site': 'cross-site' }],
        ['/api/demo', { 'sec-fetch-site': 'same-site' }],
        ['/api/demo', { origin: 'null' }],
        ['/api/session', { origin: EVIL, 'content-type': 'application/json' }],
        ['/placement/resource_providers', { origin: EVIL, 'content-type': 'application/json' }],
        // scheme-less or decorated origins do not pass as this server's own
        ['/api/demo', { origin: `http://127.0.0.1:${port}/path` }],
      ];
      for (const [path, headers] of attacks) {
        const body = path.includes('ops')
          ? '{"type":"create","payload":{"image":"x"}}'
          : path === '/api/session'
            ? JSON.stringify({ token: admin || 'x' })
            : path.startsWith('/placement')
              ? '{"name":"evil"}'
              : 'x';
        const r = await raw(served.url, 'POST', path, { ...credentials, ...headers }, body);
        expect({ path, headers, status: r.status, code: r.json.error?.code }).toEqual({
          path,
          headers,
          status: 403,
          code: 'minicloud.cross_origin',
        });
      }
      const del = await raw(served.url, 'DELETE', '/api/environments/web', {
        ...credentials,
        origin: EVIL,
      });
      expect(del.json.error?.code).toBe('minicloud.cross_origin');
      expect(await state()).toEqual(before);

      // A text/plain body is not parsed, even from this server's own origin (415).
      const plain = await raw(
        served.url,
        'POST',
        '/api/queues/k/discard',
        { ...auth, 'content-type': 'text/plain' },
        'x',
      );
      expect(plain.status).toBe(415);
      expect(plain.json.error?.code).toBe('minicloud.unsupported_media_type');

      // The server's own pages still work.
      const own = await raw(
        served.url,
        'POST',
        '/api/containers/own/ops',
        {
          ...(cookie ? { cookie } : auth),
          origin: served.url,
          'sec-fetch-site': 'same-origin',
          'content-type': 'application/json',
        },
        '{"type":"create","payload":{"image":"x"}}',
      );
      expect(own.status).toBe(202);
      if (cookie) {
        // signing out ends the session: the cookie no longer works
        const out = await raw(served.url, 'DELETE', '/api/session', {
          cookie,
          origin: served.url,
        });
        expect(out.status).toBe(204);
        const after = await raw(served.url, 'GET', '/api/environments', { cookie });
        expect(after.status).toBe(401);
      }
    });

    it('an unknown method on an existing route answers 405 with Allow, for every role', async () => {
      const callers: Record<string, string>[] = [
        {},
        ...(admin
          ? [{ authorization: `Bearer ${admin}` }, { authorization: `Bearer ${reader}` }]
          : []),
      ];
      for (const who of callers) {
        const r = await raw(served.url, 'PUT', '/api/environments', who, '{}');
        expect(r.status).toBe(405);
        expect(r.json.error?.code).toBe('minicloud.method_not_allowed');
        expect(String(r.headers.allow).split(', ')).toEqual(
          expect.arrayContaining(['GET', 'POST']),
        );
        const one = await raw(served.url, 'PATCH', '/api/queues/k/discard', who);
        expect(one.status).toBe(405);
        expect(one.headers.allow).toBe('POST');
      }
    });

    it('the dashboard cannot be framed and runs under a strict CSP', async () => {
      for (const path of ['/', '/api/health', '/no-such-file.js']) {
        const r = await raw(served.url, 'GET', path);
        expect(r.headers['x-frame-options']).toBe('DENY');
        expect(r.headers['content-security-policy']).toMatch(/frame-ancestors 'none'/);
        expect(r.headers['content-security-policy']).toMatch(/default-src 'self'/);
        expect(r.headers['x-content-type-options']).toBe('nosniff');
      }
    });

    it('every error has one shape: unknown files, long keys, huge headers', async () => {
      const missing = await raw(served.url, 'GET', '/no-such-file.js');
      expect(missing.status).toBe(404);
      expect(missing.json.error?.code).toBe('minicloud.not_found');
      const longKey = await raw(served.url, 'GET', `/api/queues/${'k'.repeat(2000)}`, auth);
      expect([400, 404]).toContain(longKey.status);
      expect(longKey.json.error?.code).toMatch(/^minicloud\./);
      expect(longKey.text.length).toBeLessThan(600);
      const huge = await raw(served.url, 'GET', '/api/health', { 'x-big': 'a'.repeat(20_000) });
      expect(huge.status).toBe(431);
      expect(huge.json.error?.code).toBe('minicloud.headers_too_large');
      expect(missing.json.error?.requestId).toMatch(/^[0-9a-f-]{36}$/);
    });

    it('Placement: a body above its limit is answered 413 with Connection: close, nothing is created', async () => {
      const list = () =>
        raw(served.url, 'GET', '/placement/resource_providers', {
          ...(admin ? { 'x-auth-token': admin } : {}),
          'openstack-api-version': 'placement 1.39',
        });
      const before = await list();
      const big = JSON.stringify({ name: 'n', pad: 'x'.repeat(2 * 1024 * 1024) });
      const r = await raw(
        served.url,
        'POST',
        '/placement/resource_providers',
        { ...(admin ? { 'x-auth-token': admin } : {}), 'content-type': 'application/json' },
        big,
      );
      expect(r.status).toBe(413);
      expect(r.headers.connection).toBe('close');
      expect((r.json as { errors?: { status?: number }[] }).errors?.[0]?.status).toBe(413);
      expect((await list()).text).toBe(before.text);
    });

    it('Placement: deep or huge values and prototype names answer 400 with a bounded message', async () => {
      const headers = {
        ...(admin ? { 'x-auth-token': admin } : {}),
        'openstack-api-version': 'placement 1.39',
      };
      const list = () => raw(served.url, 'GET', '/placement/resource_providers', headers);
      const before = await list();
      const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
      for (const body of [
        `{"name":${deep}}`,
        `{"name":"a","uuid":${deep}}`,
        JSON.stringify({ name: 'x'.repeat(100 * 1024) }),
      ]) {
        const r = await raw(
          served.url,
          'POST',
          '/placement/resource_providers',
          { ...headers, 'content-type': 'application/json' },
          body,
        );
        const detail = (r.json as { errors?: { detail?: string }[] }).errors?.[0]?.detail ?? '';
        expect({ status: r.status, short: detail.length > 0 && detail.length < 800 }).toEqual({
          status: 400,
          short: true,
        });
      }
      for (const name of ['__proto__', 'constructor']) {
        for (const path of [
          `/placement/resource_providers?resources=${name}:1`,
          `/placement/allocation_candidates?resources=${name}:1`,
        ]) {
          const r = await raw(served.url, 'GET', path, headers);
          expect({ path, status: r.status }).toEqual({ path, status: 400 });
          expect(r.text).toContain(`No such resource class ${name}`);
        }
      }
      expect((await list()).text).toBe(before.text);
    });

    it('an --allowed-host name and an --allowed-origin page are accepted, nothing more', async () => {
      const port = new URL(served.url).port;
      const named = await raw(served.url, 'GET', '/api/health', { host: `ops.example:${port}` });
      expect(named.status).toBe(200);
      const other = await raw(served.url, 'GET', '/api/health', {
        host: `ops.example.evil:${port}`,
      });
      expect(other.status).toBe(421);
      const op = (origin: string) =>
        raw(
          served.url,
          'POST',
          '/api/containers/allowed/ops',
          { ...auth, host: `ops.example:${port}`, origin, 'content-type': 'application/json' },
          '{"type":"create","payload":{"image":"x"}}',
        );
      expect((await op('https://ops.example')).status).toBe(202);
      const foreign = await op('https://evil.ops.example');
      expect({ status: foreign.status, code: foreign.json.error?.code }).toEqual({
        status: 403,
        code: 'minicloud.cross_origin',
      });
    });

    it('a refused archive upload leaves no directory behind and no path in its message', async () => {
      const evil = tar([{ name: '../evil', body: 'x' }]);
      const r = await raw(
        served.url,
        'POST',
        '/api/packages/io.evil.Pkg/1.0.0/archive',
        { ...auth, 'content-type': 'application/x-tar' },
        evil,
      );
      expect(r.status).toBe(400);
      expect(r.json.error?.code).toBe('package-cache.unsafe_archive');
      expect(r.json.error?.message).not.toContain(dir);
      expect(existsSync(join(dir, 'uploads', 'io.evil.Pkg'))).toBe(false);
      const pkg = await raw(served.url, 'GET', '/api/packages/io.evil.Pkg/1.0.0', auth);
      expect(pkg.status).toBe(404);
    });

    it('a zip that lies about its sizes or CRC-32, or is cut short, is refused (400), nothing installed', async () => {
      const before = countEntries(join(dir, 'repository'));
      const zips: [string, Buffer][] = [
        ['flipped CRC-32', lyingZip({ crc: crc32('x') })],
        ['uncompressed size too small', lyingZip({ size: 100 })],
        ['uncompressed size too large', lyingZip({ size: 5000 })],
        ['truncated', lyingZip({}).subarray(0, 120)],
      ];
      for (const [what, zip] of zips) {
        const r = await raw(
          served.url,
          'POST',
          '/api/packages/io.evil.Zip/1.0.0/archive',
          { ...auth, 'content-type': 'application/zip' },
          zip,
        );
        expect({ what, status: r.status, code: r.json.error?.code }).toEqual({
          what,
          status: 400,
          code: 'package-cache.corrupt_archive',
        });
        expect(r.json.error?.message).not.toContain(dir);
        expect(r.json.error?.message).not.toContain(tmpdir());
        expect(r.text).not.toMatch(/"stack"|file:\/\//);
      }
      expect(existsSync(join(dir, 'uploads', 'io.evil.Zip'))).toBe(false);
      expect(countEntries(join(dir, 'repository'))).toBe(before);
      const pkg = await raw(served.url, 'GET', '/api/packages/io.evil.Zip/1.0.0', auth);
      expect(pkg.status).toBe(404);
    });

    it.skipIf(process.platform !== 'linux')(
      'the package repository answers only this process: its secret and a loopback Host',
      { timeout: 120_000 },
      async () => {
        const upload = await uploadApp(served.url, auth);
        expect(upload.status).toBe(201);
        // The upload id is visible to every reader: it must not be enough.
        const seen = await raw(
          served.url,
          'GET',
          `/api/packages/${APP.fqn}/${APP.version}`,
          reader ? { authorization: `Bearer ${reader}` } : {},
        );
        expect(seen.json.id).toBe(upload.json.id);
        expect(Object.keys(seen.json).sort()).toEqual(
          ['fqn', 'id', 'integrity', 'size', 'version'].sort(),
        );
        const apiPort = Number(new URL(served.url).port);
        const others = listeningPorts(served.child.pid!).filter((p) => p !== apiPort);
        expect(others).toHaveLength(1);
        const repository = `http://127.0.0.1:${others[0]!}`;
        const path = `/packages/${APP.fqn}/${APP.version}/${String(upload.json.id)}`;
        const files0 = countEntries(join(dir, 'repository'));
        const attempts: [string, string, Record<string, string>, number, string][] = [
          ['no secret', 'GET', {}, 401, 'minicloud.unauthorized'],
          ['no secret (HEAD)', 'HEAD', {}, 401, ''],
          ['a wrong secret', 'GET', { authorization: 'Bearer x' }, 401, 'minicloud.unauthorized'],
          ['an API token', 'GET', auth, 401, 'minicloud.unauthorized'],
          [
            'a foreign Host',
            'GET',
            { host: `evil.example:${others[0]!}` },
            421,
            'minicloud.host_not_allowed',
          ],
          [
            'another port in Host',
            'GET',
            { host: '127.0.0.1:1' },
            421,
            'minicloud.host_not_allowed',
          ],
          ['an unknown path', 'GET', {}, 401, 'minicloud.unauthorized'],
        ];
        for (const [what, method, headers, status, code] of attempts) {
          const target = what === 'an unknown path' ? '/anything' : path;
          const r = await raw(repository, method, target, headers);
          expect({ what, status: r.status, code: r.json.error?.code ?? '' }).toEqual({
            what,
            status,
            code,
          });
          expect(r.headers['content-type']).not.toBe('application/x-tar');
        }
        expect(countEntries(join(dir, 'repository'))).toBe(files0);
        // The real install path fetches through the repository, with the secret.
        const env = `env-${mode}`;
        const deploy = await raw(
          served.url,
          'POST',
          '/api/environments',
          { ...auth, 'content-type': 'application/json' },
          JSON.stringify({ name: env, package: { fqn: APP.fqn, version: APP.version } }),
        );
        expect({ status: deploy.status, ok: deploy.json.ok }).toEqual({ status: 201, ok: true });
        expect(served.stdout() + served.stderr()).not.toMatch(/bearer|authorization/i);
        const gone = await raw(served.url, 'DELETE', `/api/environments/${env}`, auth);
        expect(gone.status).toBe(200);
      },
    );

    it('a failed operation is reported without a stack or a server path', async () => {
      const cast = await raw(
        served.url,
        'POST',
        '/api/containers/doomed/ops',
        { ...auth, 'content-type': 'application/json' },
        JSON.stringify({ type: 'create', payload: { image: 'x', fail: `boom at ${dir}/secret` } }),
      );
      expect(cast.status).toBe(202);
      const opId = String(cast.json.opId);
      let op: Answer | undefined;
      for (let i = 0; i < 100; i++) {
        op = await raw(served.url, 'GET', `/api/ops/${encodeURIComponent(opId)}`, auth);
        if (/"(failed|blocked|error)"/.test(op.text)) break;
        await sleep(100);
      }
      expect(op!.status).toBe(200);
      expect(op!.text).not.toMatch(/"stack"/);
      expect(op!.text).not.toContain(dir);
      expect(op!.text).not.toContain('file://');
      // A deploy that fails (and rolls back): its answer and its flow carry no stack either.
      const upload = await uploadApp(served.url, auth);
      expect([200, 201, 409]).toContain(upload.status);
      const failed = await raw(
        served.url,
        'POST',
        '/api/environments',
        { ...auth, 'content-type': 'application/json' },
        JSON.stringify({
          name: `doomed-${mode}`,
          package: { fqn: APP.fqn, version: APP.version },
          faults: { failStep: 'health-check' },
        }),
      );
      expect({ status: failed.status, ok: failed.json.ok }).toEqual({ status: 200, ok: false });
      expect(failed.text).not.toMatch(/"stack"|file:\/\//);
      expect(failed.text).not.toContain(dir);
      const flowId = String(failed.json.flowId);
      const flow = await raw(served.url, 'GET', `/api/flows/${encodeURIComponent(flowId)}`, auth);
      expect(flow.status).toBe(200);
      expect(flow.text).toMatch(/health-check/);
      const flows = await raw(served.url, 'GET', '/api/flows', auth);
      for (const f of (flows.json.flows as { flowId: string }[] | undefined) ?? []) {
        const one = await raw(
          served.url,
          'GET',
          `/api/flows/${encodeURIComponent(f.flowId)}`,
          auth,
        );
        expect(one.text).not.toMatch(/"stack"/);
        expect(one.text).not.toContain('file://');
        expect(one.text).not.toContain(dir);
      }
    });

    if (mode === 'auto') {
      it(
        'more connections than the server takes at once are closed unanswered',
        { timeout: 60_000 },
        async () => {
          const { port } = new URL(served.url);
          const open = (): Promise<ReturnType<typeof connect>> =>
            new Promise((resolve, reject) => {
              const socket = connect(Number(port), '127.0.0.1', () => resolve(socket));
              socket.on('error', reject);
            });
          const held: ReturnType<typeof connect>[] = [];
          try {
            for (let i = 0; i < 1_000; i++) held.push(await open());
            const extra = await open();
            const answer = await new Promise<string>((resolve) => {
              let text = '';
              // An answer fails the test at once (a kept-alive socket would not close).
              extra.on('data', (c: Buffer) => resolve((text += c.toString('utf8'))));
              extra.on('close', () => resolve(text));
              extra.on('error', () => undefined);
              extra.write(`GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
            });
            expect(answer).toBe('');
          } finally {
            for (const s of held) s.destroy();
          }
          // Once they are gone, the server answers again.
          let status = 0;
          for (let i = 0; i < 50 && status !== 200; i++) {
            status = (await raw(served.url, 'GET', '/api/health').catch(() => ({ status: 0 })))
              .status;
            if (status !== 200) await sleep(100);
          }
          expect(status).toBe(200);
        },
      );

      it('a client that sends headers slowly is cut off within the header timeout', async () => {
        const { port } = new URL(served.url);
        const started = Date.now();
        let answer = '';
        const closed = await new Promise<number>((resolve) => {
          const socket = connect(Number(port), '127.0.0.1', () => {
            socket.write('GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
          });
          socket.on('data', (c: Buffer) => (answer += c.toString('utf8')));
          socket.on('close', () => resolve(Date.now() - started));
          socket.on('error', () => undefined);
        });
        // headersTimeout is 10 s; Node checks every second (it checked every 30 s before).
        expect(closed).toBeLessThan(15_000);
        // …with the same error body as every other error.
        expect(answer).toMatch(/^HTTP\/1\.1 408 /);
        expect(answer).toContain('{"error":{"code":"minicloud.request_timeout"');
      }, 30_000);
    }

    if (mode === 'tokens') {
      it('one caller cannot take every event stream: 25 per token, others still get theirs', async () => {
        const readerAuth = { authorization: `Bearer ${reader}` };
        const streams: { status: number; close: () => void }[] = [];
        try {
          for (let i = 0; i < 25; i++) {
            const s = await hold(served.url, '/api/events', readerAuth);
            streams.push(s);
            expect(s.status).toBe(200);
          }
          // (held open: were it served, the test fails at once instead of waiting for its end)
          const one = await hold(served.url, '/api/events', readerAuth);
          streams.push(one);
          expect(one.status).toBe(503);
          const refused = await raw(served.url, 'GET', '/api/events', readerAuth);
          expect({ status: refused.status, code: refused.json.error?.code }).toEqual({
            status: 503,
            code: 'minicloud.too_many_streams',
          });
          const other = await hold(served.url, '/api/events', auth);
          streams.push(other);
          expect(other.status).toBe(200);
        } finally {
          for (const s of streams) s.close();
        }
      });

      it('failing clients never lock out a valid credential (API and Placement)', async () => {
        for (let i = 0; i < 30; i++) {
          await raw(served.url, 'GET', '/api/environments', {
            cookie: 'minicloud_session=mcs_bad',
          });
        }
        const bad = await raw(served.url, 'GET', '/api/environments', {
          authorization: 'Bearer mct_bad',
        });
        expect(bad.status).toBe(429);
        expect(bad.json.error?.code).toBe('minicloud.rate_limited');
        const good = await raw(served.url, 'GET', '/api/environments', auth);
        expect(good.status).toBe(200);
        const placement = await raw(served.url, 'GET', '/placement/resource_providers', {
          'x-auth-token': admin,
        });
        expect(placement.status).toBe(200);
        // Failures count per source and per presented credential: another client (127.0.0.2)
        // replaying the failing cookie is slowed down, a new one of its own is not.
        if (process.platform === 'linux') {
          const replay = await raw(
            served.url,
            'GET',
            '/api/environments',
            { cookie: 'minicloud_session=mcs_bad' },
            undefined,
            '127.0.0.2',
          );
          expect(replay.status).toBe(429);
          const own = await raw(
            served.url,
            'GET',
            '/api/environments',
            { authorization: 'Bearer mct_other-bad' },
            undefined,
            '127.0.0.2',
          );
          expect({ status: own.status, code: own.json.error?.code }).toEqual({
            status: 401,
            code: 'minicloud.unauthorized',
          });
        }
      });

      it(
        'revoking the last token keeps tokens required until disable-auth',
        { timeout: 90_000 },
        async () => {
          const run = (...args: string[]) =>
            execFileSync(process.execPath, [cli, 'token', ...args, '--database', db], {
              cwd: tmp,
              env: cleanEnv(),
              encoding: 'utf8',
            });
          const ids = run('list')
            .trim()
            .split('\n')
            .map((line) => line.split(/\s+/)[0]!);
          expect(ids).toHaveLength(2);
          for (const id of ids) run('revoke', id);
          expect(run('list').trim()).toBe('no tokens');
          const anon = await raw(
            served.url,
            'POST',
            '/api/containers/k/ops',
            { 'content-type': 'application/json' },
            '{"type":"create","payload":{"image":"x"}}',
          );
          expect(anon.status).toBe(401);
          const session = await raw(served.url, 'GET', '/api/session');
          expect(session.status).toBe(401);
          run('disable-auth');
          const open = await raw(served.url, 'GET', '/api/session');
          expect(open.json).toEqual({ auth: false, role: 'admin' });
        },
      );
    }
  });
}
