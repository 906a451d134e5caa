import { isAbsolute, resolve } from 'node:path';
import { SqlError } from './errors.js';

/** A database URL parsed by {@link parseDatabaseUrl}: a SQLite file name or a server URL. */
export type ParsedUrl =
  | { dialect: 'sqlite'; filename: string; memory: boolean }
  | { dialect: 'postgres' | 'mysql'; url: string };

/**
 * Parses a database URL: `sqlite:<path>`, `sqlite://<path>`, `sqlite::memory:`,
 * `postgres://…` / `postgresql://…`, `mysql://…` / `mariadb://…`.
 */
export function parseDatabaseUrl(url: string): ParsedUrl {
  if (typeof url !== 'string' || url.length === 0) {
    throw new SqlError(
      'sql.invalid_url',
      `database URL must be a non-empty string, got ${JSON.stringify(url)}`,
    );
  }
  if (url === 'sqlite::memory:' || url === 'sqlite://:memory:' || url === ':memory:') {
    return { dialect: 'sqlite', filename: ':memory:', memory: true };
  }
  if (url.startsWith('sqlite:')) {
    let path = url.slice('sqlite:'.length);
    if (path.startsWith('//')) path = path.slice(2);
    path = path.split('?')[0] ?? '';
    if (!path)
      throw new SqlError(
        'sql.invalid_url',
        `'${url}' names no file: use sqlite:<path> or sqlite::memory:`,
      );
    return { dialect: 'sqlite', filename: isAbsolute(path) ? path : resolve(path), memory: false };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw new SqlError(
      'sql.invalid_url',
      `'${redactUrl(url)}' is not a URL: use sqlite:<path>, postgres://… or mysql://…`,
      { cause },
    );
  }
  switch (parsed.protocol) {
    case 'postgres:':
    case 'postgresql:':
      return { dialect: 'postgres', url };
    case 'mysql:':
    case 'mariadb:':
      parsed.protocol = 'mysql:';
      return { dialect: 'mysql', url: parsed.toString() };
    default:
      throw new SqlError(
        'sql.invalid_url',
        `unknown database URL scheme '${parsed.protocol}' in '${redactUrl(url)}': use sqlite:<path>, sqlite::memory:, postgres://… or mysql://…`,
      );
  }
}

/**
 * The URL with any password replaced by `***`, for messages and logs. A URL the parser refuses
 * (a password with `/`, `?`, `#` or `@` not percent-encoded) is redacted as text, from the first
 * `:` after the user up to the last `@`: a host never contains `@`, a password may.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/:\/\/([^:/@]*):.*@/s, '://$1:***@');
  }
}
