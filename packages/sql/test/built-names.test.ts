// The built package, as users load it: its error class prints its own name everywhere (a bundler
// that renames classes referring to themselves would print `_SqlError`).
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';

describe('dist/ error class name', () => {
  it('SqlError prints as SqlError in String(), name, constructor.name, stack and util.inspect', async () => {
    const { SqlError } = await import('../dist/index.js');
    const error = new SqlError('sql.closed', 'it broke');
    expect(SqlError.name).toBe('SqlError');
    expect(error.constructor.name).toBe('SqlError');
    expect(error.name).toBe('SqlError');
    expect(String(error)).toBe('SqlError: it broke');
    expect(error.stack?.split('\n')[0]).toBe('SqlError: it broke');
    expect(inspect(error).split('\n')[0]).toBe('SqlError: it broke');
    expect(inspect(error)).not.toMatch(/_SqlError/);
  });
});
