export { PackageCache } from './cache.js';
export type {
  AcquireOptions,
  CachedPackage,
  EntriesOptions,
  FetchContext,
  FetchedPackage,
  FetchResult,
  PackageCacheEvents,
  PackageCacheOptions,
  PackageCacheStats,
  PackageEntry,
  PackageFetcher,
  PackageLockKind,
  PackageProgress,
  PruneOptions,
  PruneResult,
} from './types.js';
export { DEFAULT_ARCHIVE_LIMITS } from './limits.js';
export type { ArchiveLimits } from './limits.js';
export { PackageCacheError } from './errors.js';
export type { PackageCacheErrorCode } from './errors.js';
export { validateRef, refKey, MAX_SEGMENT_LENGTH } from './ref.js';
export type { PackageRef } from './ref.js';
export { parseIntegrity } from './integrity.js';
export type { IntegrityAlgorithm } from './integrity.js';
