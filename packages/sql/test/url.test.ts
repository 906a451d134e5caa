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
