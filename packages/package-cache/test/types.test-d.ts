import { expectTypeOf, test } from 'vitest';
import type { Lease } from '@rigging/core';
import type {
  CachedPackage,
  PackageCacheEvents,
  PackageFetcher,
  PackageRef,
} from '../src/index.js';
import type { httpFetcher } from '../src/fetchers.js';

test('public types', () => {
  expectTypeOf<CachedPackage>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<CachedPackage['path']>().toEqualTypeOf<string>();
  expectTypeOf<CachedPackage>().not.toMatchTypeOf<Lease>();
  expectTypeOf<PackageCacheEvents['wait']['lock']>().toEqualTypeOf<'usage' | 'download'>();
  expectTypeOf<ReturnType<typeof httpFetcher>>().toEqualTypeOf<PackageFetcher>();
  expectTypeOf<Parameters<PackageFetcher>[0]>().toEqualTypeOf<PackageRef>();
});
