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
