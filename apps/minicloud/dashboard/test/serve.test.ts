import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, get, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DashboardHub, contentType, serveStatic } from '../serve.js';
import type { DashboardEvent } from '../../src/wire.js';

function rawStatus(base: string, path: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    get(`${base}${path}`, (res) => {
      res.resume();
      resolve(res.statusCode);
    }).on('error', reject);
  });
}

describe('serveStatic and DashboardHub', () => {
  let tmp: string;
  let dir: string;
  let server: Server;
  let base: string;
  const hub = new DashboardHub();

  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'dash-static-'));
    dir = join(tmp, 'dist');
    await mkdir(join(dir, 'assets'), { recursive: true });
    await writeFile(join(dir, 'index.html'), '<!doctype html><title>x</title>');
    await writeFile(join(dir, 'assets', 'app-1.js'), 'export {}');
    await writeFile(join(tmp, 'secret.txt'), 'secret');
    const statics = serveStatic(dir, { prefix: '/ui' });
    server = createServer((req, res) => {
      if (req.url === '/api/events') return hub.handle(req, res);
      void statics(req, res).then((served) => {
        if (!served) res.writeHead(404).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    hub.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await rm(tmp, { recursive: true, force: true });
  });

  it('serves files under the prefix with content types and cache headers', async () => {
    for (const path of ['/ui', '/ui/', '/ui/index.html']) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(res.headers.get('cache-control')).toBe('no-cache');
    }
    const js = await fetch(`${base}/ui/assets/app-1.js`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect(await js.text()).toBe('export {}');
    const head = await fetch(`${base}/ui/assets/app-1.js`, { method: 'HEAD' });
    expect(head.headers.get('content-length')).toBe('9');
  });

  it('refuses other methods, paths outside the prefix and traversal', async () => {
    expect((await fetch(`${base}/index.html`)).status).toBe(404);
    expect((await fetch(`${base}/ui/missing.js`)).status).toBe(404);
    // Raw paths: fetch() would normalise the dots away before sending.
    for (const path of [
      '/ui/..%2fsecret.txt',
      '/ui/assets/..%2f..%2fsecret.txt',
      '/ui/%2e%2e/secret.txt',
    ]) {
      expect(await rawStatus(base, path), path).toBe(404);
    }
    expect((await fetch(`${base}/ui/assets`)).status).toBe(404);
    expect((await fetch(`${base}/ui/index.html`, { method: 'POST' })).status).toBe(404);
    expect(contentType('a.css')).toBe('text/css; charset=utf-8');
    expect(contentType('a.bin')).toBe('application/octet-stream');
  });

  it('streams a snapshot, then published events, and keeps state', async () => {
    hub.publish({ type: 'queue:removed', key: 'nothing' });
    const ac = new AbortController();
    const res = await fetch(`${base}/api/events`, { signal: ac.signal });
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    const events: DashboardEvent[] = [];
    const readUntil = async (n: number) => {
      while (events.length < n) {
        const { value, done } = await reader.read();
        if (done) throw new Error('stream ended');
        text += value;
        let i: number;
        while ((i = text.indexOf('\n\n')) !== -1) {
          const block = text.slice(0, i);
          text = text.slice(i + 2);
          const data = block.split('\n').find((l) => l.startsWith('data: '));
          if (data) events.push(JSON.parse(data.slice(6)) as DashboardEvent);
        }
      }
    };
    await readUntil(1);
    expect(events[0]!.type).toBe('snapshot');
    await expect.poll(() => hub.clients).toBe(1);
    hub.publish({ type: 'cache:update', cache: { hits: 3 } });
    await readUntil(2);
    expect(events[1]).toEqual({ type: 'cache:update', cache: { hits: 3 } });
    expect(hub.state.cache.hits).toBe(3);
    ac.abort();
    await expect.poll(() => hub.clients).toBe(0);
  });
});
