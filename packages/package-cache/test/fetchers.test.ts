import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { PackageCache } from '../src/index.js';
import { etagToId, httpFetcher, revalidate } from '../src/fetchers.js';
import { sri, tarOf, tempDir } from './helpers.js';

interface Pkg {
  body: Buffer;
  etag: string;
}

/** A small package server: ETags, Range/If-Range, If-None-Match, and scripted faults. */
class PackageServer {
  packages = new Map<string, Pkg>();
  faults: ('503' | '500' | 'stall' | 'cut')[] = [];
  requests: { method: string; url: string; headers: IncomingMessage['headers'] }[] = [];
  server: Server;
  constructor() {
    this.server = createServer((req, res) => this.handle(req, res));
  }
  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  put(path: string, body: Buffer): Pkg {
    const pkg = { body, etag: `"${createHash('sha1').update(body).digest('hex').slice(0, 16)}"` };
    this.packages.set(path, pkg);
    return pkg;
  }
  handle(req: IncomingMessage, res: ServerResponse) {
    this.requests.push({ method: req.method!, url: req.url!, headers: req.headers });
    const pkg = this.packages.get(req.url!);
    const fault = this.faults.shift();
    if (fault === '503') return res.writeHead(503, { 'retry-after': '0' }).end();
    if (fault === '500') return res.writeHead(500).end();
    if (fault === 'stall') return; // never answers
    if (!pkg) return res.writeHead(404).end();
    const headers = { etag: pkg.etag, 'accept-ranges': 'bytes', 'x-integrity': sri(pkg.body) };
    if (req.headers['if-none-match'] === pkg.etag) return res.writeHead(304, headers).end();
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (range && req.headers['if-range'] === pkg.etag) {
      const from = Number(range[1]);
      res.writeHead(206, {
        ...headers,
        'content-length': pkg.body.length - from,
        'content-range': `bytes ${from}-${pkg.body.length - 1}/${pkg.body.length}`,
      });
      return res.end(req.method === 'HEAD' ? undefined : pkg.body.subarray(from));
    }
    res.writeHead(200, { ...headers, 'content-length': pkg.body.length });
    if (req.method === 'HEAD') return res.end();
    if (fault === 'cut') {
      res.write(pkg.body.subarray(0, Math.floor(pkg.body.length / 2)));
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    res.end(pkg.body);
  }
  close() {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(r));
  }
}

const pkgBody = (text: string) =>
  tarOf([
    { name: 'manifest.yaml', content: text },
    { name: 'blob', content: Buffer.alloc(200_000, 3) },
  ]);

let servers: PackageServer[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});

async function setup() {
  const server = new PackageServer();
  servers.push(server);
  const base = await server.listen();
  return { server, base };
}

describe('httpFetcher', () => {
  it('downloads through PackageCache with integrity from X-Integrity and progress', async () => {
    const { server, base } = await setup();
    server.put('/pkgs/io.app/1.0/u1', pkgBody('v1'));
    const cache = await PackageCache.open({
      root: await tempDir(),
      fetch: httpFetcher({ url: `${base}/pkgs/{fqn}/{version}/{id}` }),
    });
    const progress: { received: number; total?: number | undefined }[] = [];
    await using pkg = await cache.acquire(
      { fqn: 'io.app', version: '1.0', id: 'u1' },
      { onProgress: (p) => progress.push(p) },
    );
    expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('v1');
    expect(pkg.integrity).toBe(sri(server.packages.get('/pkgs/io.app/1.0/u1')!.body));
    expect(progress.at(-1)).toMatchObject({ received: pkg.size > 0 ? expect.any(Number) : 0 });
    expect(progress.at(-1)!.total).toBe(server.packages.get('/pkgs/io.app/1.0/u1')!.body.length);
  });

  it('retries 503s and stalled requests, resumes a cut body with Range + If-Range', async () => {
    const { server, base } = await setup();
    const body = pkgBody('retry');
    server.put('/p', body);
    server.faults = ['503', 'stall', 'cut'];
    const fetch = httpFetcher({ url: `${base}/p`, retries: 3, retryDelayMs: 1, timeoutMs: 300 });
    const cache = await PackageCache.open({ root: await tempDir(), fetch });
    await using pkg = await cache.acquire({ fqn: 'a', version: '1', id: 'x' });
    expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('retry');
    const ranged = server.requests.filter((r) => r.headers.range);
    expect(ranged).toHaveLength(1);
    expect(ranged[0]!.headers['if-range']).toBe(server.packages.get('/p')!.etag);
  });

  it('gives up with package-cache.timeout / http_error, caching nothing', async () => {
    const { server, base } = await setup();
    server.faults = ['stall'];
    const cache = await PackageCache.open({
      root: await tempDir(),
      fetch: httpFetcher({ url: `${base}/{id}`, retries: 0, timeoutMs: 100 }),
    });
    const e1 = await cache.acquire({ fqn: 'a', version: '1', id: 'x' }).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e1, 'package-cache.timeout')).toBe(true);
    const e2 = await cache
      .acquire({ fqn: 'a', version: '1', id: 'missing' })
      .catch((x: unknown) => x);
    expect(RiggingError.hasCode(e2, 'package-cache.http_error')).toBe(true);
    expect((e2 as RiggingError).details).toMatchObject({ status: 404 });
    expect(server.requests).toHaveLength(2); // 404 is not retried
    expect(cache.stats().entries).toBe(0);
  });

  it('refuses a body whose integrity does not match the catalog', async () => {
    const { server, base } = await setup();
    server.put('/p', pkgBody('tampered'));
    const cache = await PackageCache.open({
      root: await tempDir(),
      fetch: httpFetcher({ url: `${base}/p`, integrity: () => sri(Buffer.from('expected')) }),
    });
    const e = await cache.acquire({ fqn: 'a', version: '1', id: 'x' }).catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
  });

  it('ETag revalidation: 304 keeps the id, a re-upload gives a new id and the old one is removed', async () => {
    const { server, base } = await setup();
    const url = `${base}/io.app/1.0`;
    server.put('/io.app/1.0', pkgBody('first'));
    const cache = await PackageCache.open({
      root: await tempDir(),
      fetch: httpFetcher({ url: `${base}/{fqn}/{version}`, matchEtag: true }),
    });
    const r1 = await revalidate(url);
    expect(r1).toMatchObject({ modified: true, status: 200 });
    const first = await cache.acquire({ fqn: 'io.app', version: '1.0', id: r1.id! });
    await first.release();
    const again = await revalidate(url, { etag: r1.etag });
    expect(again).toMatchObject({ modified: false, status: 304, id: r1.id });

    server.put('/io.app/1.0', pkgBody('second'));
    const r2 = await revalidate(url, { etag: r1.etag });
    expect(r2.modified).toBe(true);
    expect(r2.id).not.toBe(r1.id);
    // A fetch for the stale id is refused: the bytes changed since it was resolved.
    const stale = await cache
      .acquire({ fqn: 'io.app', version: '1.1', id: r1.id! })
      .catch((x: unknown) => x);
    expect(RiggingError.hasCode(stale, 'package-cache.http_error')).toBe(true);
    await using second = await cache.acquire({ fqn: 'io.app', version: '1.0', id: r2.id! });
    expect(await readFile(join(second.path, 'manifest.yaml'), 'utf8')).toBe('second');
    expect(existsSync(first.path)).toBe(false);
  });

  it('waits between retries as the backoff says (core Backoff), and validates the options', async () => {
    const { server, base } = await setup();
    server.put('/p', pkgBody('backoff'));
    server.faults = ['500', '500'];
    const asked: number[] = [];
    const backoff = (retry: number) => {
      asked.push(retry);
      return 1;
    };
    const cache = await PackageCache.open({
      root: await tempDir(),
      fetch: httpFetcher({ url: `${base}/p`, retries: 2, backoff }),
    });
    await using pkg = await cache.acquire({ fqn: 'a', version: '1', id: 'x' });
    expect(await readFile(join(pkg.path, 'manifest.yaml'), 'utf8')).toBe('backoff');
    expect(asked).toEqual([1, 2]);
    const bad = (o: object) => () => httpFetcher({ url: 'http://x/', ...o });
    expect(bad({ retries: 0, retryDelayMs: 0 })).not.toThrow(); // no retry; retry at once
    expect(bad({ retries: 1.5 })).toThrow(/httpFetcher: retries must be an integer >= 0, got 1.5/);
    expect(bad({ timeoutMs: 0 })).toThrow(/httpFetcher: timeoutMs must be a finite number > 0/);
    expect(bad({ retryDelayMs: -1 })).toThrow(/retryDelayMs/);
    expect(bad({ backoff: { factor: 0.5 } })).toThrow(/backoff.factor/);
    await expect(revalidate('http://x/', { retries: -1 })).rejects.toThrow(/revalidate: retries/);
  });

  it('etagToId keeps safe ETags and hashes the others', () => {
    expect(etagToId('"abc-123"')).toBe('abc-123');
    expect(etagToId('W/"abc"')).toBe('abc');
    expect(etagToId('"a/b"')).toMatch(/^e[0-9a-f]{32}$/);
    expect(() => httpFetcher({ url: 3 as unknown as string })).toThrow(TypeError);
  });
});
