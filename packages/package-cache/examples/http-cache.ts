// Serve a package over HTTP, then fetch it through the cache from two callers at once:
// one download, both get the same directory, kept intact while in use.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buffer } from 'node:stream/consumers';
import { create } from 'tar';
import { PackageCache } from '@rigging/package-cache';
import { httpFetcher } from '@rigging/package-cache/fetchers';

// A package as a server would store it: a gzipped tar with a manifest.
const src = await mkdtemp(join(tmpdir(), 'package-src-'));
await writeFile(join(src, 'manifest.yaml'), 'FullName: io.example.Web\n');
const archive = await buffer(create({ gzip: true, cwd: src }, ['manifest.yaml']));
const server = createServer((req, res) => {
  res.writeHead(200, { 'content-length': archive.length, etag: '"v1"' }).end(archive);
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

const root = await mkdtemp(join(tmpdir(), 'package-cache-example-'));
const cache = new PackageCache({
  root,
  fetch: httpFetcher({ url: `${base}/packages/{fqn}/{version}/{id}`, retries: 2 }),
  maxBytes: 100 * 1024 * 1024,
});
cache.on('wait', (w) => {
  if (!w.done) console.log(`waiting for the ${w.lock} lock of ${w.ref.fqn} held by pid ${w.pid}`);
});
cache.on('download', (d) =>
  console.log(`downloaded ${d.ref.fqn} (${d.size} bytes, ${d.integrity})`),
);

const ref = { fqn: 'io.example.Web', version: '1.0.0', id: 'upload-1' };
const [a, b] = await Promise.all([cache.acquire(ref), cache.acquire(ref)]);
console.log(`same directory: ${a.path === b.path}`);
console.log(`manifest: ${(await readFile(join(a.path, 'manifest.yaml'), 'utf8')).trim()}`);
await a.release();
await b.release();

const again = await cache.acquire(ref);
try {
  console.log(`second acquire hit the cache: ${again.hit}`);
} finally {
  await again.release();
}
console.log(JSON.stringify(cache.stats()));

await cache.close();
server.close();
await rm(root, { recursive: true, force: true });
await rm(src, { recursive: true, force: true });
