import { SqlError } from './errors.js';

const PACKAGES = { sqlite: 'better-sqlite3', postgres: 'pg', mysql: 'mysql2' } as const;

/** Loads a driver lazily; a missing one is `sql.driver_missing` naming the package to install. */
export async function loadDriver<T>(
  dialect: keyof typeof PACKAGES,
  provided?: unknown,
): Promise<T> {
  if (provided !== undefined) return provided as T;
  const name = PACKAGES[dialect];
  try {
    const mod = (await import(name)) as { default?: unknown };
    return (mod.default ?? mod) as T;
  } catch (cause) {
    const code = (cause as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      throw new SqlError(
        'sql.driver_missing',
        `the ${dialect} driver is not installed: run \`npm install ${name}\` (or pnpm add / yarn add) in your project`,
        { cause, details: { package: name } },
      );
    }
    throw new SqlError(
      'sql.driver_missing',
      `the ${dialect} driver '${name}' failed to load: ${(cause as Error).message}`,
      {
        cause,
        details: { package: name },
      },
    );
  }
}
