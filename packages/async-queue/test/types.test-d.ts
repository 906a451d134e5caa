import { describe, expectTypeOf, it } from 'vitest';
import { createQueue, type KeyStatus, type OpInput } from '../src/index.js';

describe('types', () => {
  const queue = createQueue({
    handlers: {
      create: async (p: { image: string }) => ({ id: p.image }),
      stop: (_p: null) => 'stopped' as const,
    },
  });
  type H = {
    create: (p: { image: string }) => Promise<{ id: string }>;
    stop: (p: null) => 'stopped';
  };

  it('call returns the handler result for the op type', () => {
    expectTypeOf(queue.call('k', { type: 'create', payload: { image: 'x' } })).toEqualTypeOf<
      Promise<{ id: string }>
    >();
    expectTypeOf(queue.call('k', { type: 'stop', payload: null })).toEqualTypeOf<
      Promise<'stopped'>
    >();
  });

  it('op payloads are checked against their handler', () => {
    // @ts-expect-error wrong payload for create
    void queue.cast('k', { type: 'create', payload: { nope: 1 } });
    // @ts-expect-error unknown type
    void queue.cast('k', { type: 'delete', payload: null });
    expectTypeOf<OpInput<H>>().toMatchTypeOf<{ type: 'create' | 'stop' }>();
  });

  it('key statuses include <type>-in-progress', () => {
    expectTypeOf<'create-in-progress'>().toMatchTypeOf<KeyStatus>();
    expectTypeOf<'blocked'>().toMatchTypeOf<KeyStatus>();
  });
});
