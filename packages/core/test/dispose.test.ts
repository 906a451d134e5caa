import { expect, it } from 'vitest';
import type { Lease } from '../src/index.js';

it('a lease-shaped object is released by await using', async () => {
  const released: string[] = [];
  const make = (key: string): Lease => {
    const lost = new AbortController();
    const release = async () => {
      released.push(key);
    };
    return {
      key,
      mode: 'exclusive',
      token: 1n,
      lost: lost.signal,
      release,
      [Symbol.asyncDispose]: release,
    };
  };
  {
    await using a = make('a');
    await using b = make('b');
    expect([a.key, b.key]).toEqual(['a', 'b']);
  }
  expect(released).toEqual(['b', 'a']);
});
