export { Mutex, Semaphore, ReadWriteLock, KeyedLock } from './primitives.js';
export type {
  Releaser,
  WaitOptions,
  RwPreference,
  RwOptions,
  PrimitiveOptions,
} from './primitives.js';
export { InProcessLockProvider, memoryLockProvider } from './memory.js';
export type { InProcessLockOptions } from './memory.js';
export { FileLock, encodeLockKey } from './file.js';
export type { FileLockOptions } from './file.js';
export { TwoLevelLock } from './two-level.js';
export type { TwoLevelLockOptions } from './two-level.js';
export { describeHolder } from './common.js';
export type { LockEvents, LockEmitter, ProviderBaseOptions } from './common.js';
export { LocksError } from './errors.js';
export type { LocksErrorCode } from './errors.js';
export type { AcquireOptions, Lease, LockHolder, LockMode, LockProvider } from '@rigging/core';
export { acquireAll, assertHeld, FencingGuard } from './all.js';
export type { KeySpec, MultiLease } from './all.js';
