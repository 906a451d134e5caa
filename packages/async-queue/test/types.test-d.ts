import { describe, expectTypeOf, it } from 'vitest';
import type { Backoff, BackoffSettings } from '@rigging/core';
import {
  createQueue,
  type BackoffOptions,
  type KeyStatus,
  type OpInput,
  type PolicyOptions,
} from '../src/index.js';
import type { HandlersOf } from '../src/index.js';

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

  it("policy.backoff is core's Backoff; BackoffOptions is its settings shape", () => {
    expectTypeOf<NonNullable<PolicyOptions['backoff']>>().toEqualTypeOf<Backoff>();
    expectTypeOf<BackoffOptions>().toEqualTypeOf<BackoffSettings>();
    expectTypeOf<{ initialMs: 50; factor: 2; maxMs: 1000; jitter: 0.1 }>().toMatchTypeOf<
      PolicyOptions['backoff']
    >();
    expectTypeOf<(retry: number) => number>().toMatchTypeOf<PolicyOptions['backoff']>();
  });
});

describe('a producer typed by an op-type map', () => {
  type Ops = {
    create: { payload: { image: string }; result: { id: string } };
    stop: { payload: null; result: void };
  };
  it('types payloads and results without handlers', () => {
    const producer = createQueue<Ops>({ worker: false });
    expectTypeOf(producer.call('k', { type: 'create', payload: { image: 'x' } })).toEqualTypeOf<
      Promise<{ id: string }>
    >();
    expectTypeOf(producer.call('k', { type: 'stop', payload: null })).toEqualTypeOf<
      Promise<void>
    >();
    // @ts-expect-error a payload of the wrong type
    void producer.cast('k', { type: 'create', payload: { image: 1 } });
    // @ts-expect-error an unknown op type
    void producer.cast('k', { type: 'start', payload: null });
    // @ts-expect-error a producer typed by a map is not a worker
    createQueue<Ops>({ worker: true });
    expectTypeOf(producer.drained).toBeFunction();
    expectTypeOf<HandlersOf<Ops>['create']>().parameter(0).toEqualTypeOf<{ image: string }>();
  });
});
