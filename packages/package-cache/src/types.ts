import type { Clock, LockHolder, LockMode, LockProvider, Logger } from '@rigging/core';
import type { IntegrityAlgorithm } from './integrity.js';
import type { ArchiveLimits } from './limits.js';
import type { PackageRef } from './ref.js';

/**
 * What a fetcher hands back: the package as a stream, a buffer, or a path (archive or directory).
 */
export type FetchedPackage =
  | {
      /** The archive bytes (tar, tar.gz or zip). */
      stream: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;
      /** SRI (`sha256-…`, `sha512-…`) the bytes must match. */
      integrity?: string | undefined;
      /** Expected size in bytes, for progress reports. */
      size?: number | undefined;
    }
  | {
      /** The archive bytes (tar, tar.gz or zip). */
      buffer: Uint8Array;
      /** SRI (`sha256-…`, `sha512-…`) the bytes must match. */
      integrity?: string | undefined;
    }
  | {
      /** An archive file, or a directory copied as is (integrity cannot apply to a directory). */
      path: string;
      /** SRI the archive file's bytes must match (a directory with one is refused with a `TypeError`). */
      integrity?: string | undefined;
    };

/** Download progress, in bytes. */
export interface PackageProgress {
  /** The package being downloaded. */
  readonly ref: PackageRef;
  /** Bytes received so far. */
  readonly received: number;
  /** Total bytes, when the fetcher knows it. */
  readonly total?: number | undefined;
  /** pid of the process downloading (this one, or another process sharing the cache). */
  readonly pid: number;
}

/** Options the cache passes to the fetcher. */
export interface FetchContext {
  /** Aborts when the caller that triggered the download gives up or the cache closes. */
  readonly signal: AbortSignal;
  /** Report progress (`total` when known); the cache also counts the bytes it receives. */
  onProgress(progress: { received: number; total?: number | undefined }): void;
}

/**
 * What a fetcher may return: a {@link FetchedPackage} (with an optional SRI), or bare bytes
 * (`Uint8Array`), a bare stream (async iterable or web stream), or a bare path (archive file or
 * directory).
 */
export type FetchResult =
  FetchedPackage | Uint8Array | string | AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;

/**
 * Fetches one package: a stream, a buffer, or a path (archive file or directory), plus an optional
 * SRI.
 */
export type PackageFetcher = (ref: PackageRef, context: FetchContext) => Promise<FetchResult>;

/** Options of {@link PackageCache}. */
export interface PackageCacheOptions {
  /** The cache directory; packages live in `{root}/{fqn}/{version}/{id}`. */
  root: string;
  /** Fetches a package on a miss. */
  fetch: PackageFetcher;
  /**
   * Byte cap: after each download (and on release while over the cap) the least recently used
   * packages that nobody uses are removed until the total fits.
   * @default Infinity
   */
  maxBytes?: number;
  /**
   * Packages unused for this long are removed by `prune()` and after each download.
   * @default Infinity
   */
  idleTtlMs?: number;
  /**
   * Lock provider for usage (shared) and download (exclusive) locks. It must work across every
   * process sharing `root`.
   * @default new TwoLevelLock({ dir: `${root}/.locks` }) from `@rigging/locks`
   */
  locks?: LockProvider;
  /**
   * After a download, also remove other versions of the same fqn installed earlier (when not in
   * use). Outdated ids of the same version are always removed.
   * @default 'keep'
   */
  olderVersions?: 'keep' | 'remove';
  /**
   * fsync every extracted file and directory before the atomic rename.
   * @default true
   */
  durable?: boolean;
  /**
   * How `pkg.integrity` is computed when the fetcher gives none: an SRI of this algorithm over
   * the fetched bytes, or `'none'` to skip hashing (then `pkg.integrity` is `undefined`). An
   * integrity the fetcher gives is always verified, whatever this says. Hashing is the largest
   * part of a cold install (SHA-512 ≈ 12 ms per 10 MiB here, SHA-256 ≈ 6 ms with SHA-NI).
   * @default 'sha512' (npm's choice)
   */
  integrityAlgorithm?: IntegrityAlgorithm | 'none';
  /**
   * Bounds on what a fetched package may be and expand to (archive bytes, expanded bytes,
   * entries, compression ratio, path depth, name length); see {@link ArchiveLimits}. A package
   * over a limit is refused while streaming and nothing of it stays on disk.
   * @default DEFAULT_ARCHIVE_LIMITS
   */
  limits?: ArchiveLimits;
  /**
   * How often a downloader writes its progress file and waiters poll it (ms).
   * @default 100
   */
  progressIntervalMs?: number;
  /**
   * How often a `wait` event is repeated while a wait lasts (ms).
   * @default 1000
   */
  waitReportMs?: number;
  /**
   * Minimum gap between two last-use stamps of one package (ms); keeps warm acquires cheap.
   * @default 1000
   */
  touchIntervalMs?: number;
  /** @default silentLogger */
  logger?: Logger;
  /** @default systemClock */
  clock?: Clock;
}

/** Which lock a caller waits for. */
export type PackageLockKind = 'usage' | 'download';

/** Events of {@link PackageCache}. */
export interface PackageCacheEvents {
  /**
   * A caller waits for a lock: emitted when the wait starts (`waitedMs` 0), every `waitReportMs`
   * while it lasts, and once more with `done: true`.
   */
  wait: {
    /** The package whose lock is waited for. */
    ref: PackageRef;
    /** Which lock: `usage` (held while a package is in use) or `download`. */
    lock: PackageLockKind;
    /** The mode waited for (`shared` usage, `exclusive` download). */
    mode: LockMode;
    /** The provider key waited for. */
    key: string;
    /** Who holds it, when the provider can tell. */
    holder: LockHolder | undefined;
    /** pid of the holder (from the provider, else from the download's progress file). */
    pid: number | undefined;
    /** Milliseconds waited so far (the total with `done`). */
    waitedMs: number;
    /** True on the last report of this wait (the lock was granted, or the wait failed). */
    done: boolean;
  };
  /** Download progress (this process's downloads and, for waiters, other processes' ones). */
  progress: PackageProgress;
  /** A package was found installed. */
  hit: {
    /** The package. */
    ref: PackageRef;
    /** Its directory. */
    path: string;
  };
  /** This process downloaded and installed a package. */
  download: {
    /** The package. */
    ref: PackageRef;
    /** Its directory. */
    path: string;
    /** Bytes of the extracted files. */
    size: number;
    /** SRI of the fetched bytes (`undefined` for a directory or with `integrityAlgorithm: 'none'`). */
    integrity: string | undefined;
    /** Milliseconds from the fetch to the installed package (cache clock). */
    durationMs: number;
  };
  /** A package was removed from disk. */
  remove: {
    /** The package. */
    ref: PackageRef;
    /**
     * `outdated` (a newer id of the same fqn/version was installed), `older-version` (a newer
     * version, under `olderVersions: 'remove'`), `evicted` (over `maxBytes`), `idle` (unused for
     * `idleTtlMs`) or `removed` (by {@link PackageCache.remove}).
     */
    reason: 'outdated' | 'older-version' | 'evicted' | 'idle' | 'removed';
    /** Bytes freed. */
    size: number;
  };
}

/** Counters and totals, as seen by this process (`prune()` and `refresh()` rescan the disk). */
export interface PackageCacheStats {
  /** Installed packages known to this process. */
  entries: number;
  /** Their total size in bytes. */
  bytes: number;
  /** Acquires that found the package installed. */
  hits: number;
  /** Acquires that did not (they downloaded it, or waited for another caller's download). */
  misses: number;
  /** Packages this process downloaded and installed. */
  downloads: number;
  /** Packages this process removed for `maxBytes` or `idleTtlMs`. */
  evictions: number;
  /** Leases this process holds now. */
  inUse: number;
}

/** One installed package, as listed by {@link PackageCache.entries}. */
export interface PackageEntry {
  /** `{ fqn, version, id }` of the package. */
  readonly ref: PackageRef;
  /** The package's fully qualified name. */
  readonly fqn: string;
  /** The package's version. */
  readonly version: string;
  /** The package's id (an upload id or an ETag-derived id). */
  readonly id: string;
  /** `{root}/{fqn}/{version}/{id}`. */
  readonly path: string;
  /** Bytes of the extracted files. */
  readonly bytes: number;
  /** SRI of the fetched bytes, when known. */
  readonly integrity: string | undefined;
  /** Epoch ms of the install. */
  readonly installedAt: number;
  /**
   * Epoch ms of the last acquire or release seen by any process (stamped at most every
   * `touchIntervalMs`).
   */
  readonly lastUsedAt: number;
  /** Leases on it that this process holds now. */
  readonly leasesHere: number;
  /**
   * Whether another process holds it, found by trying its exclusive usage lock without waiting:
   * `undefined` when this process holds it (the probe cannot see past its own lease) or when
   * probing is off.
   */
  readonly inUseElsewhere: boolean | undefined;
  /** In use by this process, or (probed) by another one. */
  readonly inUse: boolean;
  /**
   * Superseded (a newer id of the same fqn/version, or a newer version under
   * `olderVersions: 'remove'`) but still in use: removed when its last user releases it.
   */
  readonly outdated: boolean;
}

/** Options of {@link PackageCache.entries}. */
export interface EntriesOptions {
  /**
   * Probe packages this process does not hold with a non-blocking exclusive `tryAcquire` of
   * their usage lock, to tell whether another process uses them. The probe holds the lock for
   * an instant: an `acquire` racing with it in another process may wait that long.
   * @default true
   */
  probe?: boolean;
}

/** A package in use: its directory stays intact until released. */
export interface CachedPackage extends AsyncDisposable {
  /** `{ fqn, version, id }` of the package. */
  readonly ref: PackageRef;
  /** The package directory, `{root}/{fqn}/{version}/{id}`. */
  readonly path: string;
  /** Bytes of the extracted files. */
  readonly size: number;
  /** SRI of the fetched bytes (`undefined` when it came as a directory). */
  readonly integrity: string | undefined;
  /** True when it was already installed; false when this call or a concurrent one downloaded it. */
  readonly hit: boolean;
  /** Aborts if the usage lock is lost (the package may then be removed under you). */
  readonly lost: AbortSignal;
  /** Releases the usage lock. Idempotent. */
  release(): Promise<void>;
}

/** Options of {@link PackageCache.acquire}. */
export interface AcquireOptions {
  /** Gives up the call: it rejects with `signal.reason`, and a download it runs is aborted. */
  signal?: AbortSignal | undefined;
  /** Progress of the download this call triggers or waits for (also from other processes). */
  onProgress?: ((progress: PackageProgress) => void) | undefined;
}

/** Options of {@link PackageCache.prune}. */
export interface PruneOptions {
  /** @default the cache's `maxBytes` */
  maxBytes?: number;
  /** @default the cache's `idleTtlMs` */
  idleTtlMs?: number;
}

/** What a prune did. */
export interface PruneResult {
  /** Packages removed. */
  removed: PackageRef[];
  /** Candidates kept because they were in use. */
  inUse: PackageRef[];
  /** Installed packages after the prune. */
  entries: number;
  /** Their total size in bytes. */
  bytes: number;
}

/** What the cache knows of an installed package. @internal */
export interface Entry {
  ref: PackageRef;
  size: number;
  integrity: string | undefined;
  installedAt: number;
  /** Last use (ms since the epoch, from the clock; at least the sidecar's mtime after a rescan). */
  lastUsed: number;
  /** When the sidecar's mtime was last stamped. */
  touchedAt: number;
}
