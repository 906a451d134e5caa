import { dirname, isAbsolute, join, resolve } from 'node:path';
import type { OpenDatabaseOptions } from '@rigging/sql';
import { UsageError } from './errors.js';

/** Where minicloud keeps its state and how it found out. */
export interface Config {
  /** The database URL every command opens. */
  databaseUrl: string;
  /** Where it came from, for messages. */
  databaseSource: '--database' | 'MINICLOUD_DATABASE_URL' | 'default';
  /** The SQLite file behind `databaseUrl`, when it is one (absolute path). */
  sqliteFile: string | undefined;
  /** The directory relative paths are resolved from. */
  baseDir: string;
  /**
   * Where files live (package cache, package repository): `--data-dir`, else
   * `MINICLOUD_DATA_DIR`, else the SQLite file's directory, else `<baseDir>/.minicloud`.
   */
  dataDir: string;
  /**
   * What every command opens the database with: on PostgreSQL, statements prepared by name on
   * each pooled connection (`MINICLOUD_PG_PREPARED_STATEMENTS`, default 100; `0` behind a
   * pooler in transaction mode).
   */
  databaseOptions: OpenDatabaseOptions;
}

/** The default database, relative to the directory minicloud was started from. */
export const DEFAULT_DATABASE_PATH = join('.minicloud', 'minicloud.db');

/**
 * Resolves the configuration from command-line flags and the environment. Relative SQLite paths
 * are resolved from the directory the user ran the command in: `INIT_CWD` when started through
 * `npm run` / `pnpm run` (which change into the package directory), else the current directory.
 */
export function loadConfig(
  flags: { database?: string | undefined; dataDir?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): Config {
  const baseDir = env.INIT_CWD ? resolve(env.INIT_CWD) : cwd;
  let raw: string;
  let databaseSource: Config['databaseSource'];
  if (flags.database !== undefined) {
    raw = flags.database;
    databaseSource = '--database';
  } else if (env.MINICLOUD_DATABASE_URL) {
    raw = env.MINICLOUD_DATABASE_URL;
    databaseSource = 'MINICLOUD_DATABASE_URL';
  } else {
    raw = `sqlite:${DEFAULT_DATABASE_PATH}`;
    databaseSource = 'default';
  }
  const { url, file } = resolveSqlite(raw, baseDir);
  const rawDir = flags.dataDir ?? env.MINICLOUD_DATA_DIR;
  const dataDir = rawDir
    ? resolve(baseDir, rawDir)
    : file
      ? dirname(file)
      : resolve(baseDir, '.minicloud');
  // Named statements per pooled PostgreSQL connection: @rigging/sql's default unless set.
  const databaseOptions: OpenDatabaseOptions = env.MINICLOUD_PG_PREPARED_STATEMENTS
    ? { preparedStatements: intEnv('MINICLOUD_PG_PREPARED_STATEMENTS', 0, 100_000, env) }
    : {};
  return {
    databaseUrl: url,
    databaseSource,
    sqliteFile: file,
    baseDir,
    dataDir,
    databaseOptions,
  };
}

/** An integer setting from the environment, within `min`–`max`, else a usage error. */
export function intEnv(
  name: string,
  min: number,
  max: number,
  env: NodeJS.ProcessEnv = process.env,
): number {
  const raw = env[name] ?? '';
  if (!/^\d{1,7}$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new UsageError(`${name} must be an integer from ${min} to ${max}, got '${raw}'`);
  }
  return Number(raw);
}

function resolveSqlite(url: string, baseDir: string): { url: string; file: string | undefined } {
  if (!url.startsWith('sqlite:') || url === 'sqlite::memory:' || url === 'sqlite://:memory:') {
    return { url, file: undefined };
  }
  let path = url.slice('sqlite:'.length);
  if (path.startsWith('//')) path = path.slice(2);
  if (!path) return { url, file: undefined }; // openDatabase explains what is wrong
  const file = isAbsolute(path) ? path : resolve(baseDir, path);
  return { url: `sqlite:${file}`, file };
}
