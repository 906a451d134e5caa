import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isRetryableError, parseDatabaseUrl, redactUrl } from '../src/index.js';

describe('parseDatabaseUrl', () => {
  it.each([
    ['sqlite::memory:', { dialect: 'sqlite', filename: ':memory:', memory: true }],
    ['sqlite:/abs/x.db', { dialect: 'sqlite', filename: '/abs/x.db', memory: false }],
    ['sqlite:///abs/x.db', { dialect: 'sqlite', filename: '/abs/x.db', memory: false }],
    ['sqlite:rel/x.db', { dialect: 'sqlite', filename: resolve('rel/x.db'), memory: false }],
    ['sqlite:x.db?mode=rwc', { dialect: 'sqlite', filename: resolve('x.db'), memory: false }],
    ['postgres://u@h/db', { dialect: 'postgres', url: 'postgres://u@h/db' }],
    ['postgresql://u@h/db', { dialect: 'postgres', url: 'postgresql://u@h/db' }],
    ['mysql://u@h:3306/db', { dialect: 'mysql', url: 'mysql://u@h:3306/db' }],
    ['mariadb://u@h:3306/db', { dialect: 'mysql', url: 'mysql://u@h:3306/db' }],
  ])('%s', (url, expected) => {
    expect(parseDatabaseUrl(url)).toEqual(expected);
  });

  it.each(['', 'sqlite:', 'sqlite://', 'redis://h', 'http://h/x', 'no scheme'])(
    'rejects %j with sql.invalid_url',
    (url) => {
      expect(() => parseDatabaseUrl(url)).toThrow(
        expect.objectContaining({ code: 'sql.invalid_url' }),
      );
    },
  );

  it('redacts passwords', () => {
    expect(redactUrl('postgres://u:secret@h/db')).toBe('postgres://u:***@h/db');
    expect(redactUrl('postgres://u@h/db')).toBe('postgres://u@h/db');
    const e = (() => {
      try {
        parseDatabaseUrl('oracle://u:secret@h/db');
      } catch (error) {
        return error as Error;
      }
    })();
    expect(e?.message).not.toContain('secret');
  });

  it.each([
    // the URL parser refuses these, so they are redacted as text: up to the last `@` before the host
    ['postgres://u:se/cr@et@host/db', 'postgres://u:***@host/db'],
    ['postgres://u:a/b@c@d@host:5432/db', 'postgres://u:***@host:5432/db'],
    ['mysql://u:a?b#c@host/db', 'mysql://u:***@host/db'],
    ['postgres://:se/cr@et@host/db', 'postgres://:***@host/db'],
    // parsed: the password's `@` is percent-encoded, and hidden with the rest
    ['postgres://u:p@ss@host/db', 'postgres://u:***@host/db'],
  ])('hides every character of a password with @ and / in %j', (url, shown) => {
    expect(redactUrl(url)).toBe(shown);
    for (const part of ['se/cr', 'cr@et', 'et@', 'a/b', 'b@c', 'a?b', 'b#c', 'p@ss', 'ss@']) {
      if (url.includes(part)) expect(redactUrl(url)).not.toContain(part);
    }
    // the error of a URL that cannot be parsed does not show it either
    try {
      parseDatabaseUrl(url);
    } catch (error) {
      expect((error as Error).message).not.toMatch(/se\/cr|cr@et|a\/b|a\?b|p@ss/);
    }
  });
});

describe('isRetryableError', () => {
  it.each([
    [{ code: '40001' }, 'postgres', true],
    [{ code: '40P01' }, 'postgres', true],
    [{ code: 'ER_LOCK_DEADLOCK', errno: 1213 }, 'mysql', true],
    [{ errno: 1205 }, 'mysql', true],
    [{ code: 'SQLITE_BUSY' }, 'sqlite', true],
    [{ code: 'SQLITE_BUSY_SNAPSHOT' }, 'sqlite', true],
    [{ code: '40001' }, 'sqlite', false],
    [{ code: '23505' }, 'postgres', false],
    [new Error('wrapped', { cause: { code: '40001' } }), 'postgres', true],
  ] as const)('%j on %s → %s', (error, dialect, expected) => {
    expect(isRetryableError(error, dialect)).toBe(expected);
  });
});
