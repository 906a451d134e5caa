// The built package, as users load it: its error class prints its own name everywhere (a bundler
// that renames classes referring to themselves would print `_RiggingError`).
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';

describe('dist/ error class name', () => {
  it('RiggingError prints as RiggingError in String(), name, constructor.name, stack and util.inspect', async () => {
    const { RiggingError } = await import('../dist/index.js');
    const error = new RiggingError('x.test', 'it broke');
    expect(RiggingError.name).toBe('RiggingError');
    expect(error.constructor.name).toBe('RiggingError');
    expect(error.name).toBe('RiggingError');
    expect(String(error)).toBe('RiggingError: it broke');
    expect(error.stack?.split('\n')[0]).toBe('RiggingError: it broke');
    expect(inspect(error).split('\n')[0]).toBe('RiggingError: it broke');
    expect(inspect(error)).not.toMatch(/_RiggingError/);
  });
});
