import { positiveIntegerOption, positiveOption } from '@rigging/core';
import { unsafe } from './entry-checks.js';
import { PackageCacheError } from './errors.js';

/**
 * Bounds on what one fetched package may be and expand to. Every limit is checked while the
 * bytes stream (a header announcing too much is refused before its body is written), so a small
 * archive that inflates to gigabytes is stopped early and its scratch directory removed.
 * `Infinity` disables a limit.
 */
export interface ArchiveLimits {
  /** Bytes the fetcher may hand over (the archive as fetched). @default 512 MiB */
  maxArchiveBytes?: number;
  /** Bytes the extracted files may add up to. @default 512 MiB */
  maxExpandedBytes?: number;
  /** Entries (files, directories, links) an archive may hold. @default 10000 */
  maxEntries?: number;
  /**
   * Largest ratio of inflated to compressed bytes (gzip stream, or zip entries against the zip's
   * size), checked once more than 1 MiB has been inflated. @default 50
   */
  maxRatio?: number;
  /** Largest number of path components in an entry name. @default 32 */
  maxPathDepth?: number;
  /** Longest path component of an entry name, in UTF-8 bytes. @default 255 */
  maxNameLength?: number;
}

/** {@link ArchiveLimits} with every default applied. */
export type ResolvedLimits = Required<ArchiveLimits>;

const MiB = 1024 ** 2;

/**
 * The defaults of {@link ArchiveLimits}: room for real packages (the largest measure a few
 * thousand files, tens of MiB and a ratio under 10), not for bombs. Cargo refuses crates that
 * unpack past 512 MiB at more than 20:1, Go module zips are capped at 500 MiB.
 */
export const DEFAULT_ARCHIVE_LIMITS: Readonly<Required<ArchiveLimits>> = Object.freeze({
  maxArchiveBytes: 512 * MiB,
  maxExpandedBytes: 512 * MiB,
  maxEntries: 10_000,
  maxRatio: 50,
  maxPathDepth: 32,
  maxNameLength: 255,
});

/**
 * Inflated bytes below which the ratio is not judged (small archives compress unevenly). @internal
 */
export const RATIO_FLOOR = 1024 * 1024;

/**
 * Validates `limits` (each field a positive number, integers where counted, or `Infinity`).
 * @internal
 */
export function resolveLimits(owner: string, limits: ArchiveLimits | undefined): ResolvedLimits {
  if (limits === undefined) return { ...DEFAULT_ARCHIVE_LIMITS };
  if (typeof limits !== 'object' || limits === null) {
    throw new TypeError(`${owner}: limits must be an object, got ${String(limits)}`);
  }
  const d = DEFAULT_ARCHIVE_LIMITS;
  const count = (name: keyof ArchiveLimits): number => {
    const v = limits[name];
    return v === Infinity ? v : positiveIntegerOption(owner, `limits.${name}`, v, d[name]);
  };
  const ratio = limits.maxRatio;
  return {
    maxArchiveBytes: count('maxArchiveBytes'),
    maxExpandedBytes: count('maxExpandedBytes'),
    maxEntries: count('maxEntries'),
    maxRatio:
      ratio === Infinity ? ratio : positiveOption(owner, 'limits.maxRatio', ratio, d.maxRatio),
    maxPathDepth: count('maxPathDepth'),
    maxNameLength: count('maxNameLength'),
  };
}

/**
 * The running account of one extraction: every path that reads or writes a package calls it, and
 * it throws the first limit crossed. @internal
 */
export class ArchiveBudget {
  #compressed = 0;
  #inflated = 0;
  #expanded = 0;
  #entries = 0;

  constructor(
    readonly limits: ResolvedLimits,
    readonly what: string,
  ) {}

  /** A fresh account with the same limits (for a pass that may be abandoned and redone). */
  fresh(): ArchiveBudget {
    return new ArchiveBudget(this.limits, this.what);
  }

  /** The fetched archive reached `total` bytes (or announced that size). */
  archiveBytes(total: number): void {
    if (total > this.limits.maxArchiveBytes) {
      throw tooLarge(this.what, 'maxArchiveBytes', this.limits.maxArchiveBytes, total);
    }
  }

  /** `n` compressed bytes went into a decompressor. */
  compressed(n: number): void {
    this.#compressed += n;
  }

  /** `n` more bytes came out of a decompressor that has been fed `compressed` bytes so far. */
  inflated(n: number, compressed = this.#compressed): void {
    this.#inflated += n;
    if (this.#inflated <= RATIO_FLOOR || compressed <= 0) return;
    const ratio = this.#inflated / compressed;
    if (ratio > this.limits.maxRatio) {
      throw new PackageCacheError(
        'package-cache.ratio_exceeded',
        `refusing ${this.what}: ${this.#inflated} bytes inflated from ${compressed} (ratio ${ratio.toFixed(0)}, limit maxRatio ${this.limits.maxRatio})`,
        {
          details: {
            limit: 'maxRatio',
            max: this.limits.maxRatio,
            inflated: this.#inflated,
            compressed,
          },
        },
      );
    }
  }

  /**
   * One more entry named `path`, whose body is `size` bytes: counts it, checks its name's depth
   * and component lengths and the running total of expanded bytes, before anything is written.
   */
  entry(path: string, size: number): void {
    this.#entries++;
    if (this.#entries > this.limits.maxEntries) {
      throw new PackageCacheError(
        'package-cache.too_many_entries',
        `refusing ${this.what}: more than ${this.limits.maxEntries} entries (limit maxEntries)`,
        { details: { limit: 'maxEntries', max: this.limits.maxEntries, entry: path } },
      );
    }
    const parts = path.split(/[\\/]+/).filter((p) => p !== '' && p !== '.');
    if (parts.length > this.limits.maxPathDepth) {
      const depth = `is ${parts.length} levels deep (limit maxPathDepth ${this.limits.maxPathDepth})`;
      throw unsafe(this.what, depth, path);
    }
    for (const part of parts) {
      if (Buffer.byteLength(part) > this.limits.maxNameLength) {
        const long = `has a name longer than ${this.limits.maxNameLength} bytes (limit maxNameLength)`;
        throw unsafe(this.what, long, path);
      }
    }
    this.#expanded += size;
    if (this.#expanded > this.limits.maxExpandedBytes) {
      throw tooLarge(
        this.what,
        'maxExpandedBytes',
        this.limits.maxExpandedBytes,
        this.#expanded,
        path,
      );
    }
  }
}

function tooLarge(
  what: string,
  limit: 'maxArchiveBytes' | 'maxExpandedBytes',
  max: number,
  actual: number,
  entry?: string,
): PackageCacheError {
  const noun = limit === 'maxArchiveBytes' ? 'the archive' : 'its contents';
  return new PackageCacheError(
    'package-cache.too_large',
    `refusing ${what}: ${noun} reached ${actual} bytes (limit ${limit} ${max})`,
    { details: entry === undefined ? { limit, max, actual } : { limit, max, actual, entry } },
  );
}
