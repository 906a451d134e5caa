import type { Lease, LockProvider } from '@rigging/core';
import { describe, expectTypeOf, it } from 'vitest';
import {
  FileLock,
  InProcessLockProvider,
  KeyedLock,
  ReadWriteLock,
  TwoLevelLock,
  acquireAll,
  type LockEvents,
  type MultiLease,
  type Releaser,
} from '../src/index.js';
import { SqlLockProvider, sqlLockProvider } from '../src/sql.js';

describe('public types', () => {
  it('every provider is a LockProvider', () => {
    expectTypeOf<FileLock>().toMatchTypeOf<LockProvider>();
    expectTypeOf<TwoLevelLock>().toMatchTypeOf<LockProvider>();
    expectTypeOf<InProcessLockProvider>().toMatchTypeOf<LockProvider>();
    expectTypeOf<SqlLockProvider>().toMatchTypeOf<LockProvider>();
    expectTypeOf(sqlLockProvider).returns.toEqualTypeOf<SqlLockProvider>();
  });

  it('run helpers keep the callback result type', () => {
    expectTypeOf(new ReadWriteLock().runShared(() => 1)).toEqualTypeOf<Promise<number>>();
    expectTypeOf(new KeyedLock().runExclusive('k', async () => 'x')).toEqualTypeOf<
      Promise<string>
    >();
    expectTypeOf(new KeyedLock().acquire('k')).toEqualTypeOf<Promise<Releaser>>();
  });

  it('acquireAll and events are typed', () => {
    expectTypeOf(acquireAll).returns.toEqualTypeOf<Promise<MultiLease>>();
    expectTypeOf<MultiLease['leases']>().toEqualTypeOf<readonly Lease[]>();
    expectTypeOf<LockEvents['lock:acquired']['token']>().toEqualTypeOf<bigint>();
    const locks = new FileLock('/tmp/x');
    locks.events.on('lock:released', (e) => {
      expectTypeOf(e.afterLoss).toEqualTypeOf<boolean>();
    });
  });
});
