import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SqlError } from './errors.js';

/** The npm package each dialect's driver comes from. */
export const DRIVER_PACKAGES = {
  sqlite: 'better-sqlite3',
  postgres: 'pg',
  mysql: 'mysql2',
} as const;

/** How a module is imported; tests swap it to prove the error path. */
export type Importer = (specifier: string) => Promise<unknown>;

const defaultImporter: Importer = (specifier) => import(specifier);

function isNotFound(cause: unknown, packageName: string): boolean {
  const e = cause as { code?: string; message?: string } | undefined;
  if (e?.code !== 'ERR_MODULE_NOT_FOUND' && e?.code !== 'MODULE_NOT_FOUND') return false;
  // Only the driver itself missing counts: a driver that is installed but broken (one of its own
  // dependencies missing) must not be reported as "not installed".
  return (e.message ?? '').includes(`'${packageName}'`);
}

/**
 * Imports `packageName` lazily. A missing package is `sql.driver_missing` naming the package to
 * install; a package that fails to load for another reason (a native module built for another
 * Node version, a broken install) is `sql.driver_missing` too, with the loader's reason.
 */
export async function importDriver<T>(
  packageName: string,
  what: string,
  importer: Importer = defaultImporter,
): Promise<T> {
  let mod: { default?: unknown };
  try {
    mod = (await importer(packageName)) as { default?: unknown };
  } catch (cause) {
    if (isNotFound(cause, packageName)) {
      throw new SqlError(
        'sql.driver_missing',
        `the ${what} driver is not installed: run \`npm install ${packageName}\` (or pnpm add / yarn add ${packageName}) in your project`,
        { cause, details: { package: packageName } },
      );
    }
    throw new SqlError(
      'sql.driver_missing',
      `the ${what} driver '${packageName}' is installed but failed to load: ${(cause as Error)?.message ?? String(cause)}; reinstall it (\`npm rebuild ${packageName}\` for a native module)`,
      { cause, details: { package: packageName } },
    );
  }
  return (mod.default ?? mod) as T;
}

/** Loads a dialect's driver lazily, or returns the one the caller provided. */
export async function loadDriver<T>(
  dialect: keyof typeof DRIVER_PACKAGES,
  provided?: unknown,
): Promise<T> {
  if (provided !== undefined && provided !== null) return provided as T;
  const what = dialect === 'sqlite' ? 'SQLite' : dialect === 'postgres' ? 'PostgreSQL' : 'MySQL';
  return importDriver<T>(DRIVER_PACKAGES[dialect], what, defaultImporter);
}

/**
 * Refuses, before it is loaded, a better-sqlite3 whose major crashes on the running Node: 13 on
 * Node 20 (a segmentation fault on open), 12 on Node 24 and later (an abort at exit). The version
 * is read from the installed package's `package.json`, found as `import('better-sqlite3')` finds
 * it from `from` (see {@link installedVersion}); nothing is checked when it cannot be read (the
 * import then says why).
 * @throws `sql.driver_unsupported` naming the installed version and the one to install.
 * @internal
 */
export function checkSqliteDriver(nodeVersion: string, from: string | URL): void {
  const version = installedVersion('better-sqlite3', from);
  if (version === undefined) return;
  const driverMajor = Number.parseInt(version, 10);
  const nodeMajor = Number.parseInt(nodeVersion, 10);
  const wanted =
    nodeMajor <= 20 && driverMajor >= 13
      ? 12
      : nodeMajor >= 24 && driverMajor <= 12
        ? 13
        : undefined;
  if (wanted === undefined) return;
  throw new SqlError(
    'sql.driver_unsupported',
    `better-sqlite3 ${version} crashes on Node ${nodeVersion} (${wanted === 12 ? 'a segmentation fault' : 'an abort at exit'}): install better-sqlite3@${wanted} (\`npm install better-sqlite3@${wanted}\`); @rigging/sql supports better-sqlite3 12 on Node 20 and 22, 13 on Node 22 and later`,
    {
      details: {
        package: 'better-sqlite3',
        installed: version,
        node: nodeVersion,
        use: `^${wanted}`,
      },
    },
  );
}

/**
 * The version of `packageName` that `import(packageName)` would load from the module `from`, or
 * undefined when there is none or its `package.json` cannot be read. ESM resolution walks up the
 * `node_modules` folders only: `NODE_PATH` and the global folders, which `require.resolve` also
 * searches, are not where `import()` looks (pnpm's bin shims set `NODE_PATH`), so they are not
 * read here either.
 */
function installedVersion(packageName: string, from: string | URL): string | undefined {
  const start =
    from instanceof URL || from.startsWith('file:') ? fileURLToPath(from) : String(from);
  for (let dir = dirname(start); ; dir = dirname(dir)) {
    const manifest = join(dir, 'node_modules', packageName, 'package.json');
    if (basename(dir) !== 'node_modules' && existsSync(manifest)) {
      try {
        const version = (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown })
          .version;
        return typeof version === 'string' ? version : undefined;
      } catch {
        return undefined;
      }
    }
    if (dirname(dir) === dir) return undefined;
  }
}
