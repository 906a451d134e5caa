import { execFile } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import Module from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { spawnNode } from '@rigging/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { checkSqliteDriver, importDriver } from '../src/drivers.js';
import { openDatabase, SqlError } from '../src/index.js';

const run = promisify(execFile);
const here = dirname(new URL(import.meta.url).pathname);
const pkgDir = resolve(here, '..');
const tmp = mkdtempSync(join(tmpdir(), 'rigging-sql-bad-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('URL', () => {
  it('rejects unknown schemes, empty URLs and paths-less sqlite URLs', async () => {
    const e = await openDatabase('oracle://x').catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.invalid_url' });
    expect((e as Error).message).toMatch(/use sqlite:<path>/);
    await expect(openDatabase('')).rejects.toMatchObject({ code: 'sql.invalid_url' });
    await expect(openDatabase('sqlite:')).rejects.toMatchObject({ code: 'sql.invalid_url' });
    await expect(openDatabase('not a url')).rejects.toMatchObject({ code: 'sql.invalid_url' });
  });

  it('hides passwords in messages', async () => {
    const e = await openDatabase('postgres://u:secret@127.0.0.1:1/x', {
      connectTimeoutMs: 2000,
    }).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.unreachable' });
    expect((e as Error).message).not.toContain('secret');
  });

  it('rejects bad options with a TypeError naming the option and the value', async () => {
    await expect(openDatabase('sqlite::memory:', { busyTimeoutMs: -1 })).rejects.toThrow(
      /busyTimeoutMs.*-1/,
    );
    await expect(
      openDatabase('sqlite::memory:', { synchronous: 'sometimes' as never }),
    ).rejects.toThrow(TypeError);
    await expect(openDatabase('sqlite::memory:', { poolSize: 0 })).rejects.toThrow(
      /openDatabase: poolSize must be an integer >= 1, got 0/,
    );
    await expect(openDatabase('sqlite::memory:', { poolSize: 1.5 })).rejects.toThrow(/1\.5/);
    await expect(openDatabase('sqlite::memory:', { statementCacheSize: NaN })).rejects.toThrow(
      /openDatabase: statementCacheSize must be an integer >= 0, got NaN/,
    );
    await using database = await openDatabase('sqlite::memory:');
    await expect(database.transaction(async () => 1, { retries: -1 })).rejects.toThrow(
      /transaction: retries must be an integer >= 0, got -1/,
    );
    await expect(
      database.transaction(async () => 1, { signal: 'stop' as unknown as AbortSignal }),
    ).rejects.toThrow(/transaction: signal must be an AbortSignal, got stop/);
  });
});

describe('unreachable servers', () => {
  it.each([
    ['postgres://postgres@127.0.0.1:1/x', 'PostgreSQL'],
    ['mysql://root@127.0.0.1:1/x', 'MySQL'],
  ])('%s → sql.unreachable', async (url, what) => {
    const e = await openDatabase(url, { connectTimeoutMs: 2000 }).catch((err: unknown) => err);
    expect(SqlError.isInstance(e)).toBe(true);
    expect(e).toMatchObject({ code: 'sql.unreachable' });
    expect((e as Error).message).toContain(what);
    expect((e as Error).message).toMatch(/is the server running/);
  });
});

describe('SQLite paths', () => {
  it('a path under a regular file cannot be created → sql.cannot_open', async () => {
    const file = join(tmp, 'plain.txt');
    writeFileSync(file, 'x');
    const e = await openDatabase(`sqlite:${join(file, 'sub', 'x.db')}`).catch(
      (err: unknown) => err,
    );
    expect(e).toMatchObject({ code: 'sql.cannot_open' });
    expect((e as Error).message).toMatch(/check the path/);
  });

  it('a directory is not a database → sql.cannot_open', async () => {
    const dir = join(tmp, 'adir');
    mkdirSync(dir);
    await expect(openDatabase(`sqlite:${dir}`)).rejects.toMatchObject({
      code: 'sql.cannot_open',
    });
  });

  it('a file that is not a SQLite database → sql.cannot_open', async () => {
    const file = join(tmp, 'garbage.db');
    writeFileSync(file, 'this is not a database, just some text that is long enough'.repeat(20));
    await expect(openDatabase(`sqlite:${file}`)).rejects.toMatchObject({
      code: 'sql.cannot_open',
    });
  });

  // root reads any file, so the open runs in a child that drops root privileges first (CI is root)
  it('an unreadable file → sql.cannot_open', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sql-unreadable-'));
    try {
      chmodSync(dir, 0o755); // the unprivileged child can reach the file, but not read it
      const file = join(dir, 'unreadable.db');
      writeFileSync(file, '');
      chmodSync(file, 0o000);
      const child = spawnNode(join(here, 'fixtures', 'open-unprivileged.ts'), [file]);
      expect(await child.exited, child.stderr()).toBe(0);
      expect(child.lines[0]).toMatch(/^uid [1-9]\d*$/);
      expect(child.lines[1]).toBe('code sql.cannot_open');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('creates missing directories', async () => {
    await using db = await openDatabase(`sqlite:${join(tmp, 'a', 'b', 'c.db')}`);
    expect(db.url).toBe(`sqlite:${join(tmp, 'a', 'b', 'c.db')}`);
  });
});

describe('a better-sqlite3 that crashes this Node', () => {
  /** A project whose node_modules holds a better-sqlite3 of `version` (its package.json only). */
  const projectWith = (version: string) => {
    const root = mkdtempSync(join(tmpdir(), 'sql-driver-'));
    const pkg = join(root, 'node_modules', 'better-sqlite3');
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name: 'better-sqlite3', version }));
    // loading it would fail loudly: the check must refuse before any load
    writeFileSync(join(pkg, 'index.js'), 'throw new Error("loaded");');
    return {
      from: join(root, 'app.js'),
      drop: () => rmSync(root, { recursive: true, force: true }),
    };
  };

  it.each([
    ['13.0.0', '20.20.2', '12', 'segmentation fault'],
    ['12.11.1', '24.1.0', '13', 'abort at exit'],
    ['12.4.1', '25.0.0', '13', 'abort at exit'],
  ])('better-sqlite3 %s on Node %s is refused, naming %s', (installed, node, use, why) => {
    const project = projectWith(installed);
    try {
      let error: unknown;
      try {
        checkSqliteDriver(node, project.from);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(SqlError);
      expect(error).toMatchObject({
        code: 'sql.driver_unsupported',
        details: { package: 'better-sqlite3', installed, node, use: `^${use}` },
      });
      expect((error as Error).message).toContain(`npm install better-sqlite3@${use}`);
      expect((error as Error).message).toContain(why);
    } finally {
      project.drop();
    }
  });

  it.each([
    ['12.11.1', '20.20.2'],
    ['12.11.1', '22.12.0'],
    ['13.0.0', '22.12.0'],
    ['13.0.0', '24.1.0'],
  ])('better-sqlite3 %s on Node %s passes', (installed, node) => {
    const project = projectWith(installed);
    try {
      expect(() => checkSqliteDriver(node, project.from)).not.toThrow();
    } finally {
      project.drop();
    }
  });

  it('NODE_PATH is not searched: import() does not look there', () => {
    const other = projectWith('13.0.0');
    const root = mkdtempSync(join(tmpdir(), 'sql-driver-none-'));
    const saved = process.env.NODE_PATH;
    try {
      // as pnpm's bin shims do: require.resolve() would find the 13 there, import() would not
      process.env.NODE_PATH = join(dirname(other.from), 'node_modules');
      (Module as unknown as { _initPaths(): void })._initPaths();
      expect(() => checkSqliteDriver('20.20.2', join(root, 'app.js'))).not.toThrow();
      expect(() => checkSqliteDriver('20.20.2', pathToFileURL(other.from))).toThrow(
        expect.objectContaining({ code: 'sql.driver_unsupported' }),
      );
    } finally {
      if (saved === undefined) delete process.env.NODE_PATH;
      else process.env.NODE_PATH = saved;
      (Module as unknown as { _initPaths(): void })._initPaths();
      rmSync(root, { recursive: true, force: true });
      other.drop();
    }
  });

  it('a driver that cannot be found is left to the import (sql.driver_missing)', () => {
    const root = mkdtempSync(join(tmpdir(), 'sql-driver-none-'));
    try {
      expect(() => checkSqliteDriver('20.20.2', join(root, 'app.js'))).not.toThrow();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('openDatabase checks the installed driver before loading it (this Node, this install)', async () => {
    await using db = await openDatabase('sqlite::memory:');
    expect(db.dialect).toBe('sqlite');
  });

  it('openDatabase refuses the installed driver on a Node it crashes (sql.driver_unsupported)', async () => {
    // the installed better-sqlite3, as openDatabase finds it, on the Node where its major crashes
    const installed = (
      JSON.parse(
        readFileSync(join(pkgDir, 'node_modules', 'better-sqlite3', 'package.json'), 'utf8'),
      ) as {
        version: string;
      }
    ).version;
    const crashing = Number.parseInt(installed, 10) >= 13 ? '20.20.2' : '24.1.0';
    const saved = Object.getOwnPropertyDescriptor(process, 'versions')!;
    Object.defineProperty(process, 'versions', {
      ...saved,
      value: { ...process.versions, node: crashing },
    });
    try {
      const e = await openDatabase('sqlite::memory:').catch((err: unknown) => err);
      expect(e).toBeInstanceOf(SqlError);
      expect(e).toMatchObject({
        code: 'sql.driver_unsupported',
        details: { package: 'better-sqlite3', installed, node: crashing },
      });
    } finally {
      Object.defineProperty(process, 'versions', saved);
    }
  });
});

describe('missing driver', () => {
  it('importDriver names the package to install', async () => {
    const e = await importDriver('rigging-no-such-driver', 'Test').catch((err: unknown) => err);
    expect(e).toMatchObject({
      code: 'sql.driver_missing',
      details: { package: 'rigging-no-such-driver' },
    });
    expect((e as Error).message).toContain('npm install rigging-no-such-driver');
  });

  it('an installed driver that fails to load is reported with its reason', async () => {
    const e = await importDriver('pg', 'Test', () =>
      Promise.reject(new Error('NODE_MODULE_VERSION mismatch')),
    ).catch((err: unknown) => err);
    expect(e).toMatchObject({ code: 'sql.driver_missing' });
    expect((e as Error).message).toMatch(/installed but failed to load.*NODE_MODULE_VERSION/);
  });

  it('better-sqlite3 without its native module → sql.driver_missing with a rebuild hint', async () => {
    // better-sqlite3 loads its addon in the constructor, so the import succeeds and `new` fails.
    class Unbuilt {
      constructor() {
        throw new Error('Could not locate the bindings file. Tried: build/better_sqlite3.node');
      }
    }
    const e = await openDatabase('sqlite::memory:', { driver: Unbuilt }).catch(
      (err: unknown) => err,
    );
    expect(e).toMatchObject({
      code: 'sql.driver_missing',
      details: { package: 'better-sqlite3' },
    });
    expect((e as Error).message).toContain('npm rebuild better-sqlite3');
  });

  // The built package, installed in a project that has kysely and @rigging/core but no driver.
  it.each([
    ['sqlite:x.db', 'better-sqlite3'],
    ['postgres://127.0.0.1/x', 'pg'],
    ['mysql://127.0.0.1/x', 'mysql2'],
  ])('the built package in a project without drivers: %s → %s', async (url, pkg) => {
    const project = join(tmp, `project-${pkg}`);
    const nm = join(project, 'node_modules');
    const self = join(nm, '@rigging', 'sql');
    mkdirSync(self, { recursive: true });
    cpSync(join(pkgDir, 'dist'), join(self, 'dist'), { recursive: true });
    cpSync(join(pkgDir, 'package.json'), join(self, 'package.json'));
    symlinkSync(realpathSync(join(pkgDir, 'node_modules', 'kysely')), join(nm, 'kysely'));
    symlinkSync(join(pkgDir, '..', 'core'), join(nm, '@rigging', 'core'));
    writeFileSync(
      join(project, 'main.mjs'),
      `import { openDatabase } from '@rigging/sql';
try { await openDatabase(process.argv[2]); console.log('opened?!'); }
catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message, details: e.details })); }`,
    );
    const { stdout } = await run(process.execPath, ['main.mjs', url], {
      cwd: project,
      env: { ...process.env, NODE_PATH: '' },
    });
    const out = JSON.parse(stdout) as { code: string; message: string; details: unknown };
    expect(out.code).toBe('sql.driver_missing');
    expect(out.message).toContain(`npm install ${pkg}`);
    expect(out.details).toEqual({ package: pkg });
  });
});
