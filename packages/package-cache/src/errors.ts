import { RiggingError } from '@rigging/core';

/** Every error code thrown by `@rigging/package-cache`. */
export type PackageCacheErrorCode =
  /** fqn, version or id is not a safe path segment (`..`, separators, NUL, too long, …). */
  | 'package-cache.invalid_ref'
  /** The fetched bytes do not match the integrity (SRI) the fetcher announced. */
  | 'package-cache.integrity_mismatch'
  /**
   * An archive entry escapes the target, links outside it, is a device/FIFO, or has a path deeper
   * than `maxPathDepth` or a name longer than `maxNameLength`.
   */
  | 'package-cache.unsafe_archive'
  /** The archive, or what it expands to, is larger than `maxArchiveBytes` / `maxExpandedBytes`. */
  | 'package-cache.too_large'
  /** The archive holds more than `maxEntries` entries. */
  | 'package-cache.too_many_entries'
  /** The archive inflates more than `maxRatio` times its compressed size. */
  | 'package-cache.ratio_exceeded'
  /**
   * The archive is damaged or its headers lie: a truncated or malformed zip or gzip, sizes or
   * names that differ between a zip's local headers and its central directory, an entry longer or
   * shorter than declared, or bytes whose CRC-32 does not match (`details.entry` names the entry).
   */
  | 'package-cache.corrupt_archive'
  /**
   * The fetched bytes are neither a tar (optionally gzipped) nor a zip archive, or the fetched
   * path is neither a regular file nor a directory (a FIFO, a socket, a device).
   */
  | 'package-cache.unsupported_format'
  /** The fetcher failed (its error is the `cause`). */
  | 'package-cache.fetch_failed'
  /** The HTTP fetcher got a non-retryable status or ran out of retries. */
  | 'package-cache.http_error'
  /** An HTTP attempt (headers or the gap between two chunks) took longer than `timeoutMs`. */
  | 'package-cache.timeout'
  /** The cache was closed. */
  | 'package-cache.closed';

/** The error class of this package; branch on `code`. */
export class PackageCacheError extends RiggingError<PackageCacheErrorCode> {
  override readonly name = 'PackageCacheError';
}
