import { expectTypeOf, test } from 'vitest';
import {
  TypedEmitter,
  RiggingError,
  type Lease,
  type LockProvider,
  type Logger,
  type Json,
} from '../src/index.js';

test('emitter payloads are typed per event', () => {
  const e = new TypedEmitter<{ 'a:x': { n: number }; 'a:y': { s: string } }>();
  e.on('a:x', (p) => expectTypeOf(p).toEqualTypeOf<{ n: number }>());
  // @ts-expect-error wrong payload
  e.emit('a:y', { n: 1 });
  // @ts-expect-error unknown event
  e.on('a:z', () => {});
  expectTypeOf(e.on('a:x', () => {})).toEqualTypeOf<() => void>();
});

test('contracts', () => {
  expectTypeOf<Lease['token']>().toEqualTypeOf<bigint>();
  expectTypeOf<Lease['lost']>().toEqualTypeOf<AbortSignal>();
  expectTypeOf<Lease>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<ReturnType<LockProvider['acquire']>>().toEqualTypeOf<Promise<Lease>>();
  expectTypeOf<RiggingError<'a.b'>['code']>().toEqualTypeOf<'a.b'>();
  expectTypeOf<{ a: [1, 'x'] }>().toMatchTypeOf<Json>();
  expectTypeOf<Logger['child']>().returns.toEqualTypeOf<Logger>();
});
