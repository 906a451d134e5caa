import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import type { Clock } from '@rigging/core';
import type { PackageRef } from '@rigging/package-cache';
import type { Database } from '@rigging/sql';
import { create as createTar } from 'tar';
import { MinicloudError } from '../errors.js';
import type { MinicloudTables } from '../migrations.js';

/** One file of an uploaded package. */
export interface PackageFile {
  path: string;
  content: string | Uint8Array;
}

const FQN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const VERSION = /^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$/;
/** Most bytes one upload may hold. */
export const MAX_UPLOAD_BYTES = 64 * 1024 * 1024;

/**
 * Checks an upload before anything touches the disk: the fqn and version become directory
 * names, the file paths tar entries, so none may escape (`..`, absolute paths, backslashes,
 * NUL) or be absurd. Throws `minicloud.invalid_input` naming the culprit.
 */
export function checkUpload(fqn: unknown, version: unknown, files: unknown): void {
  const bad = (message: string) => new MinicloudError('minicloud.invalid_input', message);
  if (typeof fqn !== 'string' || !FQN.test(fqn) || fqn.includes('..')) {
    throw bad(
      `package fqn must be 1-128 letters, digits, '.', '_' or '-', got ${JSON.stringify(fqn)}`,
    );
  }
  if (typeof version !== 'string' || !VERSION.test(version) || version.includes('..')) {
    throw bad(
      `package version must be 1-64 letters, digits, '.', '+', '_' or '-', got ${JSON.stringify(version)}`,
    );
  }
  if (!Array.isArray(files) || files.length === 0 || files.length > 10_000) {
    throw bad('a package needs 1 to 10000 files');
  }
  const seen = new Set<string>();
  const dirs = new Set<string>();
  let bytes = 0;
  for (const f of files as PackageFile[]) {
    const path = (f as { path?: unknown } | null)?.path;
    if (
      typeof path !== 'string' ||
      !path ||
      Buffer.byteLength(path) > 100 ||
      path.startsWith('/') ||
      /[\\\0]/.test(path) ||
      path.split('/').some((seg) => seg === '' || seg === '.' || seg === '..')
    ) {
      throw bad(
        `file path must be relative, at most 100 bytes, without '..', '.', empty segments, '\\' or NUL, got ${JSON.stringify(path)}`,
      );
    }
    if (seen.has(path)) throw bad(`file ${path} appears twice`);
    seen.add(path);
    const segments = path.split('/');
    for (let i = 1; i < segments.length; i++) dirs.add(segments.slice(0, i).join('/'));
    const content = f.content as unknown;
    if (typeof content !== 'string' && !(content instanceof Uint8Array)) {
      throw bad(`file ${path}: content must be a string or bytes`);
    }
    bytes += typeof content === 'string' ? Buffer.byteLength(content) : content.byteLength;
    if (bytes > MAX_UPLOAD_BYTES) throw bad(`a package may hold at most ${MAX_UPLOAD_BYTES} bytes`);
  }
  for (const dir of dirs) {
    if (seen.has(dir)) throw bad(`${dir} is both a file and a directory`);
  }
}

/**
 * Writes `files` as a tar archive at `file` (node-tar, portable headers): the files are staged
 * in a temporary directory next to it, which is removed afterwards.
 */
async function writeArchive(files: readonly PackageFile[], file: string): Promise<void> {
  const staging = await mkdtemp(join(dirname(file), '.staging-'));
  try {
    for (const f of files) {
      const path = join(staging, f.path);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, f.content);
    }
    await createTar(
      { cwd: staging, file, portable: true },
      files.map((f) => f.path),
    );
  } catch (error) {
    await rm(file, { force: true });
    throw error;
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

/** The `sha256-<base64>` integrity and the size of a file. */
async function digest(file: string): Promise<{ integrity: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { integrity: `sha256-${hash.digest('base64')}`, size };
}

/** `Host` names that always mean this machine. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** A JSON error answer of the repository. */
function refuse(res: ServerResponse, status: number, code: string, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { code, message } }));
}

/**
 * The package repository minicloud serves itself: a catalog in the database (the current upload
 * of each fqn/version) and the archives under `<dataDir>/repository/`. A re-upload gets a new id;
 * the outdated archive is deleted, so only the current id can be fetched.
 *
 * It is served to this process's package cache only: every request must name this server in
 * `Host` (a loopback name or the bound address, with its port: no DNS rebinding) and carry the
 * secret drawn when the repository is created (`authorization: Bearer <secret>`, sent by the
 * cache's fetcher, see {@link PackageRepository.fetchHeaders}). The secret travels in a header,
 * not in the URL, because fetch errors quote the URL and reach logs and API answers.
 */
export class PackageRepository {
  readonly dir: string;
  readonly #database: Database<MinicloudTables>;
  readonly #clock: Clock;
  /** SHA-256 of the secret, compared in constant time. */
  readonly #secretDigest: Buffer;
  readonly #fetchHeaders: Readonly<Record<string, string>>;
  #server: Server | undefined;
  #url: string | undefined;
  /** Accepted `Host` names (with {@link #port}); any IP literal when bound to a wildcard. */
  #hosts = new Set<string>(LOOPBACK_NAMES);
  #anyIp = false;
  #port = '';

  constructor(database: Database<MinicloudTables>, dir: string, clock: Clock) {
    this.#database = database;
    this.dir = dir;
    this.#clock = clock;
    const secret = randomBytes(32).toString('base64url');
    this.#secretDigest = createHash('sha256').update(secret).digest();
    this.#fetchHeaders = Object.freeze({ authorization: `Bearer ${secret}` });
  }

  /**
   * The headers a fetcher of this repository sends: its secret. Only this process's package
   * cache gets them; they are never logged nor answered by the API.
   */
  get fetchHeaders(): Readonly<Record<string, string>> {
    return this.#fetchHeaders;
  }

  /**
   * Refuses (and answers) a request that does not name this server in `Host` (421
   * `minicloud.host_not_allowed`) or lacks the secret (401 `minicloud.unauthorized`); resolves
   * true when it may go on.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.#hostAllowed(req.headers.host)) {
      refuse(
        res,
        421,
        'minicloud.host_not_allowed',
        'this server does not answer to that Host name',
      );
      return false;
    }
    const presented = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
    const digest = createHash('sha256').update(presented).digest();
    if (!timingSafeEqual(digest, this.#secretDigest)) {
      refuse(res, 401, 'minicloud.unauthorized', 'the package repository serves this process only');
      return false;
    }
    return true;
  }

  #hostAllowed(value: string | undefined): boolean {
    if (value === undefined) return false;
    let url: URL;
    try {
      url = new URL(`http://${value}`);
    } catch {
      return false;
    }
    if (url.host !== value.toLowerCase() || (url.port || '80') !== this.#port) return false;
    const name = url.hostname;
    return this.#hosts.has(name) || (this.#anyIp && isIP(name.replace(/^\[|\]$/g, '')) !== 0);
  }

  /** The base URL while serving (`http://127.0.0.1:<port>`), else undefined. */
  get url(): string | undefined {
    return this.#url;
  }

  /** The URL template for the cache's HTTP fetcher. */
  get urlTemplate(): string | undefined {
    return this.#url ? `${this.#url}/packages/{fqn}/{version}/{id}` : undefined;
  }

  /** The current upload of `fqn`/`version`, if any. */
  async current(
    fqn: string,
    version: string,
  ): Promise<(PackageRef & { size: number; integrity: string }) | undefined> {
    const row = await this.#database.db
      .selectFrom('minicloud_packages')
      .selectAll()
      .where('fqn', '=', fqn)
      .where('version', '=', version)
      .executeTakeFirst();
    return row
      ? {
          fqn: row.fqn,
          version: row.version,
          id: row.id,
          size: Number(row.size),
          integrity: row.integrity,
        }
      : undefined;
  }

  /** Stores a new upload of `fqn`/`version` (a new id, replacing the previous upload). */
  async upload(
    fqn: string,
    version: string,
    files: readonly PackageFile[],
  ): Promise<PackageRef & { size: number; integrity: string }> {
    checkUpload(fqn, version, files);
    const id = `upload-${this.#clock.now().toString(36)}-${randomBytes(3).toString('hex')}`;
    const dir = join(this.dir, fqn, version);
    await mkdir(dir, { recursive: true });
    const file = join(dir, `${id}.tar`);
    await writeArchive(files, file);
    const { integrity, size } = await digest(file);
    const previous = await this.current(fqn, version);
    const row = { fqn, version, id, size, integrity, uploaded_at: this.#clock.now() };
    await this.#database.transaction(async (trx) => {
      await trx
        .deleteFrom('minicloud_packages')
        .where('fqn', '=', fqn)
        .where('version', '=', version)
        .execute();
      await trx.insertInto('minicloud_packages').values(row).execute();
    });
    if (previous && previous.id !== id) {
      await rm(join(dir, `${previous.id}.tar`), { force: true });
    }
    return { fqn, version, id, size, integrity };
  }

  /** Answers `GET /packages/{fqn}/{version}/{id}`; resolves false when the path is not one. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    const m = /^\/packages\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(
      new URL(req.url ?? '/', 'http://x').pathname,
    );
    if (!m || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
    let fqn: string, version: string, id: string;
    try {
      [fqn, version, id] = [
        decodeURIComponent(m[1]!),
        decodeURIComponent(m[2]!),
        decodeURIComponent(m[3]!),
      ];
    } catch {
      return false;
    }
    const current = await this.current(fqn, version);
    if (
      !current ||
      current.id !== id ||
      [fqn, version, id].some((s) => s.includes('..') || s.includes('/'))
    ) {
      refuse(res, 404, 'minicloud.package_not_found', `no package ${fqn}/${version}/${id}`);
      return true;
    }
    const file = join(this.dir, fqn, version, `${id}.tar`);
    const size = (await stat(file)).size;
    res.writeHead(200, {
      'content-type': 'application/x-tar',
      'content-length': size,
      etag: `"${id}"`,
      'x-integrity': current.integrity,
    });
    if (req.method === 'HEAD') {
      res.end();
      return true;
    }
    await new Promise<void>((done) => {
      const stream = createReadStream(file);
      stream.on('error', () => {
        res.destroy();
        done();
      });
      res.on('close', () => done());
      stream.pipe(res);
    });
    return true;
  }

  /** Serves the repository over HTTP on `host` (loopback) and `port` (0: a free one). */
  async listen(options: { host?: string; port?: number } = {}): Promise<string> {
    if (this.#url) return this.#url;
    const server = createServer((req, res) => {
      if (!this.admit(req, res)) return;
      this.handle(req, res).then(
        (handled) => {
          if (!handled) res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        },
        () => {
          if (!res.headersSent) res.writeHead(500).end();
          else res.destroy();
        },
      );
    });
    const host = options.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
    this.#server = server;
    const { port } = server.address() as AddressInfo;
    this.#port = String(port);
    if (host === '0.0.0.0' || host === '::') this.#anyIp = true;
    else this.#hosts.add(isIP(host) === 6 ? `[${host}]` : host.toLowerCase());
    this.#url = `http://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
    return this.#url;
  }

  /** Stops serving. */
  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    this.#url = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
