// Bounds on what a client controls, against a real `minicloud serve`: hostile package archives
// are refused with stable codes and leave nothing on disk; bodies are capped per route; event
// streams past the cap are refused without the server growing (fuzzed requests: fuzz.test.ts).
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tar, tgz } from './archives.js';
import { killServes, startServe, type Served } from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-bounds-'));
const dir = join(tmp, 'serve');
let s: Served;
beforeAll(async () => {
  mkdirSync(dir);
  s = await startServe(dir, tmp, [], { MINICLOUD_MAX_EVENT_STREAMS: '5' });
}, 120_000);
afterAll(() => {
  killServes();
  rmSync(tmp, { recursive: true, force: true });
});

/** Bytes of every file under `root` (the server's data directory). */
function diskBytes(root: string): number {
  let total = 0;
  for (const name of readdirSync(root, { recursive: true }) as string[]) {
    if (name.startsWith('.locks')) continue;
    try {
      const st = statSync(join(root, name));
      if (st.isFile()) total += st.size;
    } catch {
      // removed meanwhile
    }
  }
  return total;
}

async function upload(
  body: Buffer,
  type = 'application/gzip',
): Promise<{ status: number; code?: string }> {
  let res: Response;
  try {
    res = await fetch(`${s.url}/api/packages/app.hostile/1.0.0/archive`, {
      method: 'POST',
      headers: { 'content-type': type },
      body: new Uint8Array(body),
    });
  } catch (error) {
    // The server may answer 413 and close while a large body is still being sent: the client
    // then sees the connection cut instead of the answer. That is a refusal too.
    const code = (error as { cause?: { code?: string } }).cause?.code;
    if (code === 'EPIPE' || code === 'ECONNRESET') return { status: 413, code: 'closed-early' };
    throw error;
  }
  const json = (await res.json()) as { error?: { code: string } };
  return { status: res.status, ...(json.error ? { code: json.error.code } : {}) };
}

async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]);
}

describe('package archive uploads', () => {
  it('accepts a well-formed tar.gz and stores its files in the repository', async () => {
    const res = await fetch(`${s.url}/api/packages/app.good/1.0.0/archive`, {
      method: 'POST',
      headers: { 'content-type': 'application/gzip' },
      body: new Uint8Array(
        tgz([
          { name: 'manifest.yaml', body: 'Name: good\n' },
          { name: 'Classes/', type: 'dir' },
          { name: 'Classes/app.yaml', body: 'x: 1\n' },
        ]),
      ),
    });
    expect(res.status).toBe(201);
    const ref = (await res.json()) as { fqn: string; id: string };
    expect(ref.fqn).toBe('app.good');
    const current = await fetch(`${s.url}/api/packages/app.good/1.0.0`);
    expect(((await current.json()) as { id: string }).id).toBe(ref.id);
  });

  it('refuses a body that is not an archive media type, or none, with 415', async () => {
    for (const init of [
      { headers: { 'content-type': 'application/json' }, body: '[]' },
      { headers: { 'content-type': 'text/plain' }, body: 'x' },
      {},
    ]) {
      const res = await fetch(`${s.url}/api/packages/app.typed/1.0.0/archive`, {
        method: 'POST',
        ...init,
      });
      expect(res.status, JSON.stringify(init)).toBe(415);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
        'minicloud.unsupported_media_type',
      );
    }
  });

  it.each([
    [
      'a gzip bomb (64 MiB of zeros in ~64 KiB)',
      () => tgz([{ name: 'bomb.bin', body: Buffer.alloc(1024 ** 3 / 16) }]),
      413,
      /^package-cache\.(ratio_exceeded|too_large)$/,
    ],
    [
      '100k tiny entries',
      () => tgz(Array.from({ length: 100_000 }, (_, i) => ({ name: `f/${i}`, body: '' }))),
      413,
      /^package-cache\.too_many_entries$/,
    ],
    [
      'zip-slip (../ in a name)',
      () => tgz([{ name: '../../escaped.txt', body: 'owned' }]),
      400,
      /^package-cache\.unsafe_archive$/,
    ],
    [
      'a symlink escaping the package',
      () => tgz([{ name: 'link', type: 'symlink', link: '../../../../etc/passwd' }]),
      400,
      /^package-cache\.unsafe_archive$/,
    ],
    [
      'a symlink inside the package',
      () =>
        tgz([
          { name: 'a.txt', body: 'a' },
          { name: 'b', type: 'symlink', link: 'a.txt' },
        ]),
      400,
      /^minicloud\.unsafe_archive$/,
    ],
    ['not an archive', () => Buffer.from('just text, not a tar'), 400, /^package-cache\./],
    [
      'a body over 16 MiB',
      () => tar([{ name: 'big', body: Buffer.alloc(17 * 1024 * 1024, 1) }]),
      413,
      /^(minicloud\.body_too_large|closed-early)$/,
    ],
  ])(
    'refuses %s and leaves nothing on disk',
    async (_what, make, status, code) => {
      const before = diskBytes(dir);
      const result = await upload(make());
      expect(result.status).toBe(status);
      expect(result.code).toMatch(code);
      // Nothing kept: the scratch copy is gone and the data directory did not grow past noise.
      expect(diskBytes(dir) - before).toBeLessThan(256 * 1024);
      expect(diskBytes(join(dir, 'uploads'))).toBe(0);
      const pkg = await fetch(`${s.url}/api/packages/app.hostile/1.0.0`);
      expect(pkg.status).toBe(404);
    },
    60_000,
  );
});

describe('request bodies', () => {
  it('caps bodies per route with a stable code', async () => {
    const res = await fetch(`${s.url}/api/environments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'env-x',
        package: { fqn: 'a', version: '1' },
        pad: 'x'.repeat(100_000),
      }),
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
      'minicloud.body_too_large',
    );
    expect(
      ((await (await fetch(`${s.url}/api/environments`)).json()) as { environments: unknown[] })
        .environments,
    ).toEqual([]);
  });
});

describe('event streams', () => {
  it('refuses streams past the cap (503) without growing, and frees a slot when one closes', async () => {
    const open: AbortController[] = [];
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      const res = await fetch(`${s.url}/api/events`, { signal: ac.signal });
      expect(res.status).toBe(200);
      // A real client reads its stream (an unread one would only stall its own socket).
      void res.body!.pipeTo(new WritableStream()).catch(() => undefined);
      open.push(ac);
    }
    const rssBefore = await rssKb(s.child.pid!);
    for (let round = 0; round < 10; round++) {
      const refused = await Promise.all(
        Array.from({ length: 50 }, async () => {
          const res = await fetch(`${s.url}/api/events`);
          const body = (await res.json()) as { error: { code: string } };
          return `${res.status} ${body.error.code}`;
        }),
      );
      expect(new Set(refused)).toEqual(new Set(['503 minicloud.too_many_streams']));
    }
    const health = (await (await fetch(`${s.url}/api/health`)).json()) as {
      dashboardClients: number;
    };
    expect(health.dashboardClients).toBe(5);
    expect((await rssKb(s.child.pid!)) - rssBefore).toBeLessThan(30 * 1024);
    open.pop()!.abort();
    let status = 503;
    for (let i = 0; i < 50 && status !== 200; i++) {
      const ac = new AbortController();
      const res = await fetch(`${s.url}/api/events`, { signal: ac.signal });
      status = res.status;
      if (status === 200) {
        void res.body!.pipeTo(new WritableStream()).catch(() => undefined);
        open.push(ac);
      } else await res.arrayBuffer();
      if (status !== 200) await new Promise((r) => setTimeout(r, 20));
    }
    expect(status).toBe(200);
    for (const ac of open) ac.abort();
  }, 60_000);
});
