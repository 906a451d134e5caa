import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { Redis } from 'ioredis';

export const PG_URL = process.env.RIGGING_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env.RIGGING_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const REDIS_URL = process.env.RIGGING_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const IN_CI = process.env.CI === 'true' || process.env.CI === '1';

export type ServiceName = 'postgres' | 'mysql' | 'redis';

export interface ServiceStatus {
  name: ServiceName;
  url: string;
  available: boolean;
  /** Why it is unavailable. */
  reason?: string;
}

/** Cache: one probe per service and process (three entries at most), so a test run asks once. */
const probes = new Map<ServiceName, Promise<ServiceStatus>>();

async function probe(name: ServiceName): Promise<ServiceStatus> {
  const url = name === 'postgres' ? PG_URL : name === 'mysql' ? MYSQL_URL : REDIS_URL;
  try {
    if (name === 'postgres') {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
      await client.connect();
      await client.query('select 1');
      await client.end();
    } else if (name === 'mysql') {
      const conn = await mysql.createConnection({ uri: url, connectTimeout: 3000 });
      await conn.query('select 1');
      await conn.end();
    } else {
      const redis = new Redis(url, {
        lazyConnect: true,
        connectTimeout: 3000,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      await redis.connect();
      await redis.ping();
      redis.disconnect();
    }
    return { name, url, available: true };
  } catch (error) {
    return { name, url, available: false, reason: (error as Error).message };
  }
}

/**
 * Probes a service once per process. Unreachable: returns `available: false` and prints why
 * (the caller skips its tests), except under `CI=true`, where it throws so the file fails.
 */
export async function service(name: ServiceName): Promise<ServiceStatus> {
  let p = probes.get(name);
  if (!p) probes.set(name, (p = probe(name)));
  const status = await p;
  if (!status.available) {
    const msg = `${name} is unreachable at ${status.url} (${status.reason ?? 'unknown'})`;
    if (IN_CI) throw new Error(`${msg}; integration tests must run when CI=true`);
    console.warn(`skipping ${name} tests: ${msg}`);
  }
  return status;
}

export type DatabaseKind = 'sqlite-memory' | 'sqlite-file' | 'postgres' | 'mysql';

export interface FreshDatabase {
  kind: DatabaseKind;
  url: string;
  drop(): Promise<void>;
}

function uniqueName(prefix: string): string {
  const clean = prefix
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_')
    .slice(0, 30);
  return `rg_${clean}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

function withDatabase(url: string, dbName: string): string {
  const u = new URL(url);
  u.pathname = `/${dbName}`;
  return u.toString();
}

/** A new, empty database for one test file. */
export async function freshDatabase(kind: DatabaseKind, prefix: string): Promise<FreshDatabase> {
  if (kind === 'sqlite-memory') return { kind, url: 'sqlite::memory:', drop: async () => {} };
  if (kind === 'sqlite-file') {
    const dir = mkdtempSync(join(tmpdir(), `rigging-${prefix}-`));
    return {
      kind,
      url: `sqlite:${join(dir, 'test.db')}`,
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const name = uniqueName(prefix);
  if (kind === 'postgres') {
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    await admin.query(`create database "${name}"`);
    await admin.end();
    return {
      kind,
      url: withDatabase(PG_URL, name),
      drop: async () => {
        const c = new pg.Client({ connectionString: PG_URL });
        await c.connect();
        await c.query(`drop database if exists "${name}" with (force)`);
        await c.end();
      },
    };
  }
  const admin = await mysql.createConnection({ uri: MYSQL_URL });
  await admin.query(`create database \`${name}\``);
  await admin.end();
  return {
    kind,
    url: withDatabase(MYSQL_URL, name),
    drop: async () => {
      const c = await mysql.createConnection({ uri: MYSQL_URL });
      await c.query(`drop database if exists \`${name}\``);
      await c.end();
    },
  };
}

export interface SqlBackend {
  kind: DatabaseKind;
  /** False when the service is unreachable (outside CI): skip this backend's tests. */
  available: boolean;
  /** Creates the backend's fresh database (call in `beforeAll`). */
  create(): Promise<FreshDatabase>;
}

/**
 * The backends a conformance suite runs on: SQLite in memory and in a file, PostgreSQL and
 * MariaDB. Use with `describe.each` / `describe.skipIf(!backend.available)`.
 */
export async function sqlBackends(
  prefix: string,
  kinds: DatabaseKind[] = ['sqlite-memory', 'sqlite-file', 'postgres', 'mysql'],
): Promise<SqlBackend[]> {
  const out: SqlBackend[] = [];
  for (const kind of kinds) {
    const available =
      kind === 'postgres'
        ? (await service('postgres')).available
        : kind === 'mysql'
          ? (await service('mysql')).available
          : true;
    out.push({ kind, available, create: () => freshDatabase(kind, prefix) });
  }
  return out;
}

/** A Redis key prefix unique to this test file. */
export function redisPrefix(prefix: string): string {
  return `${uniqueName(prefix)}:`;
}

/** What `@rigging/sql` sent in the same round trip as a statement, around it. */
export interface Around {
  /** The transaction's `begin`, sent ahead of the statement. */
  opening?: string;
  /** The transaction's `commit`, sent after the statement (`withCommit`). */
  closing?: string;
  /** Statements held for the commit (`sendWithCommit`), sent ahead of the statement. */
  before?: string[];
}

/**
 * Calls `seen(client, text, around)` with the SQL text of every statement any pg client of this
 * process sends (a string or a query config, named or not), until the returned function is
 * called: one call per round trip. `around` tells what `@rigging/sql` sent in the same round trip
 * with `text`: a transaction's `begin` ahead of it, its `commit` after it. For tests that count
 * round trips or commits at the driver.
 */
export function tapPgStatements(
  seen: (client: object, text: string, around: Around) => void,
): () => void {
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function (this: object, ...args: unknown[]) {
    const q = args[0] as
      | { text?: string; opening?: unknown; closing?: unknown; before?: unknown }
      | string
      | undefined;
    const text = typeof q === 'string' ? q : (q?.text ?? '');
    const around: Around = {};
    if (typeof q === 'object' && typeof q.opening === 'string') around.opening = q.opening;
    if (typeof q === 'object' && typeof q.closing === 'string') around.closing = q.closing;
    if (typeof q === 'object' && Array.isArray(q.before) && q.before.length > 0) {
      around.before = (q.before as { text: string }[]).map((b) => b.text);
    }
    seen(this, text, around);
    return original.apply(this, args);
  };
  return () => (proto.query = original);
}

/** Round trips recorded by {@link recordPgRoundTrips}. */
export interface PgRoundTrips {
  /** The round trips `run` makes, in order (only those sent while it runs). */
  of(run: () => Promise<unknown>): Promise<string[]>;
  /** Stops recording (restores pg's `Client#query`). */
  stop(): void;
}

/**
 * Labels each round trip of this process's pg clients with the first word of its statement,
 * prefixed with the first words of a transaction opening and of statements held for the commit
 * sent ahead of it (`begin+insert`, `update+insert+commit`) and suffixed with a closing sent after
 * it (`insert+commit`): see {@link tapPgStatements}.
 */
export function recordPgRoundTrips(): PgRoundTrips {
  const trips: string[] = [];
  let recording = false;
  const stop = tapPgStatements((_client, text, { opening, closing, before = [] }) => {
    if (!recording) return;
    const word = (t: string) => t.trim().split(/\s+/)[0]!.toLowerCase();
    const ahead = [...(opening ? [opening] : []), ...before].map((t) => `${word(t)}+`).join('');
    trips.push(`${ahead}${word(text)}${closing ? `+${closing}` : ''}`);
  });
  return {
    async of(run) {
      trips.length = 0;
      recording = true;
      try {
        await run();
      } finally {
        recording = false;
      }
      return [...trips];
    },
    stop,
  };
}
