import { createHash, randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import {
  mkdir,
  readdir,
  readFile,
  rename,
  rm,
  rmdir,
  stat,
  unlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { LRUCache } from 'lru-cache';
import { TwoLevelLock } from '@rigging/locks';
import {
  RiggingError,
  TypedEmitter,
  isProcessAlive,
  nonNegativeOption,
  positiveOption,
  raceAbort,
  silentLogger,
  systemClock,
  throwIfAborted,
  type Clock,
  type Lease,
  type LockHolder,
  type LockMode,
  type LockProvider,
  type Logger,
} from '@rigging/core';
import { PackageCacheError } from './errors.js';
import { resolveLimits, type ArchiveLimits, type ResolvedLimits } from './limits.js';
import { finalizeTree, fsyncPath, materialize, type FetchedPackage } from './extract.js';
import { isIntegrityAlgorithm, type IntegrityAlgorithm } from './integrity.js';
import {
  isSegment,
  metaPath,
  outdatedPath,
  refKey,
  refPath,
  validateRef,
  type PackageRef,
} from './ref.js';

/** Download progress, in bytes. */
export interface PackageProgress {
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

/** Fetches one package: a stream, a buffer, or a path (archive file or directory), plus an optional SRI. */
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
    ref: PackageRef;
    lock: PackageLockKind;
    mode: LockMode;
    /** The provider key waited for. */
    key: string;
    /** Who holds it, when the provider can tell. */
    holder: LockHolder | undefined;
    /** pid of the holder (from the provider, else from the download's progress file). */
    pid: number | undefined;
    waitedMs: number;
    done: boolean;
  };
  /** Download progress (this process's downloads and, for waiters, other processes' ones). */
  progress: PackageProgress;
  /** A package was found installed. */
  hit: { ref: PackageRef; path: string };
  /** This process downloaded and installed a package. */
  download: {
    ref: PackageRef;
    path: string;
    size: number;
    integrity: string | undefined;
    durationMs: number;
  };
  /** A package was removed from disk. */
  remove: {
    ref: PackageRef;
    reason: 'outdated' | 'older-version' | 'evicted' | 'idle' | 'removed';
    size: number;
  };
}

/** Counters and totals, as seen by this process (`prune()` and `refresh()` rescan the disk). */
export interface PackageCacheStats {
  entries: number;
  bytes: number;
  hits: number;
  misses: number;
  downloads: number;
  evictions: number;
  /** Leases this process holds now. */
  inUse: number;
}

/** One installed package, as listed by {@link PackageCache.entries}. */
export interface PackageEntry {
  readonly ref: PackageRef;
  readonly fqn: string;
  readonly version: string;
  readonly id: string;
  /** `{root}/{fqn}/{version}/{id}`. */
  readonly path: string;
  /** Bytes of the extracted files. */
  readonly bytes: number;
  /** SRI of the fetched bytes, when known. */
  readonly integrity: string | undefined;
  /** Epoch ms of the install. */
  readonly installedAt: number;
  /** Epoch ms of the last acquire or release seen by any process (stamped at most every `touchIntervalMs`). */
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
  removed: PackageRef[];
  /** Candidates kept because they were in use. */
  inUse: PackageRef[];
  entries: number;
  bytes: number;
}

interface Meta {
  fqn: string;
  version: string;
  id: string;
  size: number;
  integrity: string | undefined;
  installedAt: number;
}

interface Entry {
  ref: PackageRef;
  size: number;
  integrity: string | undefined;
  installedAt: number;
  lastUsed: number;
  touchedAt: number;
}

interface ProgressFile {
  pid: number;
  host: string;
  received: number;
  total?: number | undefined;
  startedAt: number;
}

const TMP = '.tmp';

/**
 * A shared on-disk package cache. Any number of caches in any number of processes may share one
 * `root`: usage locks keep packages in use on disk, download locks make exactly one of them fetch.
 */
export class PackageCache extends TypedEmitter<PackageCacheEvents> {
  readonly root: string;
  readonly #fetch: PackageFetcher;
  readonly #maxBytes: number;
  readonly #idleTtlMs: number;
  readonly #olderVersions: 'keep' | 'remove';
  readonly #durable: boolean;
  readonly #algorithm: IntegrityAlgorithm | 'none';
  readonly #limits: ResolvedLimits;
  readonly #progressIntervalMs: number;
  readonly #waitReportMs: number;
  readonly #touchIntervalMs: number;
  readonly #logger: Logger;
  readonly #clock: Clock;
  #locks: LockProvider;
  #ownLocks: TwoLevelLock | undefined;
  readonly #index = new LRUCache<string, Entry>({ max: 1_000_000 });
  #bytes = 0;
  #ready: Promise<void> | undefined;
  #closed = new AbortController();
  #inUse = 0;
  /** Leases this process holds, per ref key. */
  readonly #leases = new Map<string, number>();
  #pruning: Promise<PruneResult> | undefined;
  #counters = { hits: 0, misses: 0, downloads: 0, evictions: 0 };

  constructor(options: PackageCacheOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw new TypeError('PackageCache: options must be an object');
    }
    if (typeof options.root !== 'string' || options.root === '') {
      throw new TypeError(
        `PackageCache: root must be a non-empty path, got ${String(options.root)}`,
      );
    }
    if (typeof options.fetch !== 'function') {
      throw new TypeError(`PackageCache: fetch must be a function, got ${typeof options.fetch}`);
    }
    this.root = resolve(options.root);
    this.#fetch = options.fetch;
    // 0 means something for the cap, the TTL (keep nothing unused) and the stamp gap (stamp every
    // use); an interval of 0 would spin, so those two must be > 0.
    this.#maxBytes = boundOption(OWNER, 'maxBytes', options.maxBytes, Infinity);
    this.#idleTtlMs = boundOption(OWNER, 'idleTtlMs', options.idleTtlMs, Infinity);
    this.#progressIntervalMs = positiveOption(
      OWNER,
      'progressIntervalMs',
      options.progressIntervalMs,
      100,
    );
    this.#waitReportMs = positiveOption(OWNER, 'waitReportMs', options.waitReportMs, 1000);
    this.#touchIntervalMs = nonNegativeOption(
      OWNER,
      'touchIntervalMs',
      options.touchIntervalMs,
      1000,
    );
    const ov = options.olderVersions ?? 'keep';
    if (ov !== 'keep' && ov !== 'remove') {
      throw new TypeError(
        `PackageCache: olderVersions must be 'keep' or 'remove', got ${String(ov)}`,
      );
    }
    this.#olderVersions = ov;
    this.#durable = options.durable ?? true;
    this.#limits = resolveLimits('PackageCache', options.limits);
    const algorithm = options.integrityAlgorithm ?? 'sha512';
    if (algorithm !== 'none' && !isIntegrityAlgorithm(algorithm)) {
      throw new TypeError(
        `PackageCache: integrityAlgorithm must be 'sha256', 'sha384', 'sha512' or 'none', got ${String(algorithm)}`,
      );
    }
    this.#algorithm = algorithm;
    this.#logger = options.logger ?? silentLogger;
    this.#clock = options.clock ?? systemClock;
    if (options.locks === undefined) {
      this.#locks = this.#ownLocks = defaultLocks(this.root);
    } else {
      const l = options.locks as Partial<LockProvider> | null;
      if (typeof l?.acquire !== 'function' || typeof l.tryAcquire !== 'function') {
        throw new TypeError('PackageCache: locks must be a LockProvider (acquire, tryAcquire)');
      }
      this.#locks = options.locks;
    }
    // Every acquire in flight listens to this signal (combined with its own).
    setMaxListeners(0, this.#closed.signal);
  }

  /** Creates a cache and waits until it swept dead temp dirs and indexed the disk. */
  static async open(options: PackageCacheOptions): Promise<PackageCache> {
    const cache = new PackageCache(options);
    await cache.#init();
    return cache;
  }

  /** The lock provider in use (by default a `TwoLevelLock` in `{root}/.locks`). */
  get locks(): LockProvider {
    return this.#locks;
  }

  #init(): Promise<void> {
    this.#ready ??= (async () => {
      await mkdir(join(this.root, TMP), { recursive: true });
      await this.#sweep();
      await this.refresh();
    })();
    return this.#ready;
  }

  /**
   * Returns the package, downloading it if needed, under a shared usage lock that keeps its
   * directory intact until `release()` (or the end of an `await using` scope).
   */
  async acquire(ref: PackageRef, options: AcquireOptions = {}): Promise<CachedPackage> {
    const { signal } = options;
    this.#checkOpen();
    throwIfAborted(signal);
    const r = validateRef(ref);
    if (!this.#ready) await this.#init();
    else await this.#ready;
    const key = refKey(r);
    const usage = await this.#lock(`usage:${key}`, 'shared', r, 'usage', options);
    try {
      let entry = await this.#lookup(r);
      if (entry) {
        this.#counters.hits++;
        if (this.hasListeners('hit')) this.emit('hit', { ref: r, path: refPath(this.root, r) });
        return this.#lease(entry, usage, true);
      }
      this.#counters.misses++;
      let downloaded = false;
      const dl = await this.#lock(`download:${key}`, 'exclusive', r, 'download', options);
      try {
        entry = await this.#lookup(r);
        if (!entry) {
          entry = await this.#download(r, options);
          downloaded = true;
        }
      } finally {
        await dl.release();
      }
      if (downloaded) await this.#afterDownload(r);
      return this.#lease(entry, usage, false);
    } catch (error) {
      await usage.release();
      throw error;
    }
  }

  /** Removes a package now if nobody uses it; returns false when it is in use (or absent). */
  async remove(ref: PackageRef): Promise<boolean> {
    this.#checkOpen();
    const r = validateRef(ref);
    await this.#init();
    return this.#tryRemove(r, 'removed');
  }

  /**
   * Rescans the disk, then removes packages idle longer than `idleTtlMs` and, least recently
   * used first, packages over `maxBytes` — each only if it can take its exclusive usage lock
   * without waiting (packages in use are kept).
   */
  prune(options: PruneOptions = {}): Promise<PruneResult> {
    let maxBytes: number;
    let idleTtlMs: number;
    try {
      this.#checkOpen();
      maxBytes = boundOption(`${OWNER}.prune`, 'maxBytes', options.maxBytes, this.#maxBytes);
      idleTtlMs = boundOption(`${OWNER}.prune`, 'idleTtlMs', options.idleTtlMs, this.#idleTtlMs);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    const run = async (): Promise<PruneResult> => {
      await this.#init();
      await this.refresh();
      const removed: PackageRef[] = [];
      const inUse: PackageRef[] = [];
      const now = this.#clock.now();
      // rvalues(): least recently used first.
      for (const entry of [...this.#index.rvalues()]) {
        if (!entry) continue;
        const idle = now - entry.lastUsed > idleTtlMs;
        const over = this.#bytes > maxBytes;
        if (!idle && !over) continue;
        if (await this.#tryRemove(entry.ref, idle ? 'idle' : 'evicted')) removed.push(entry.ref);
        else if (this.#index.has(refKey(entry.ref))) inUse.push(entry.ref);
      }
      return { removed, inUse, entries: this.#index.size, bytes: this.#bytes };
    };
    const previous = this.#pruning ?? Promise.resolve(undefined);
    const next = previous.then(run, run);
    this.#pruning = next;
    return next;
  }

  /** Rebuilds the in-memory LRU index from disk (last use = the sidecar's mtime). */
  async refresh(): Promise<void> {
    const found: Entry[] = [];
    for (const fqn of await dirNames(this.root)) {
      for (const version of await dirNames(join(this.root, fqn))) {
        for (const id of await dirNames(join(this.root, fqn, version))) {
          const ref = { fqn, version, id };
          const entry = await this.#readEntry(ref);
          if (entry) found.push(entry);
        }
      }
    }
    const known = this.#index;
    // Keep what this process knows: later last use, and its recency order to break ties.
    const rank = new Map<string, number>();
    let i = 0;
    for (const key of known.rkeys()) rank.set(key, i++);
    for (const e of found) {
      const old = known.get(refKey(e.ref));
      if (old && old.lastUsed > e.lastUsed) e.lastUsed = old.lastUsed;
    }
    found.sort(
      (a, b) =>
        a.lastUsed - b.lastUsed ||
        (rank.get(refKey(a.ref)) ?? -1) - (rank.get(refKey(b.ref)) ?? -1),
    );
    known.clear();
    this.#bytes = 0;
    for (const e of found) {
      known.set(refKey(e.ref), e);
      this.#bytes += e.size;
    }
  }

  /**
   * The installed packages (the disk is rescanned first), most recently used first, each with
   * its size, last use and who uses it: leases of this process and, by probing the usage lock
   * without waiting, whether another process does.
   */
  async entries(options: EntriesOptions = {}): Promise<PackageEntry[]> {
    this.#checkOpen();
    const probe = options.probe ?? true;
    if (typeof probe !== 'boolean') {
      throw new TypeError(`PackageCache: entries probe must be a boolean, got ${String(probe)}`);
    }
    await this.#init();
    await this.refresh();
    const out: PackageEntry[] = [];
    for (const e of [...this.#index.values()]) {
      const key = refKey(e.ref);
      const leasesHere = this.#leases.get(key) ?? 0;
      let inUseElsewhere: boolean | undefined;
      if (probe && leasesHere === 0) {
        const lease = await this.#locks.tryAcquire(`usage:${key}`, { mode: 'exclusive' });
        inUseElsewhere = lease === undefined;
        await lease?.release();
      }
      out.push({
        ref: e.ref,
        fqn: e.ref.fqn,
        version: e.ref.version,
        id: e.ref.id,
        path: refPath(this.root, e.ref),
        bytes: e.size,
        integrity: e.integrity,
        installedAt: e.installedAt,
        lastUsedAt: e.lastUsed,
        leasesHere,
        inUseElsewhere,
        inUse: leasesHere > 0 || inUseElsewhere === true,
        outdated: existsSync(outdatedPath(this.root, e.ref)),
      });
    }
    return out;
  }

  /** Removes a released package if a downloader marked it outdated and nobody else uses it. */
  async #removeIfOutdated(ref: PackageRef): Promise<void> {
    const marker = outdatedPath(this.root, ref);
    // One local stat on the release path; the marker is rare.
    if (!existsSync(marker)) return;
    let reason: 'outdated' | 'older-version' = 'outdated';
    try {
      if (readFileSync(marker, 'utf8').trim() === 'older-version') reason = 'older-version';
      await this.#tryRemove(ref, reason);
    } catch (error) {
      this.#logger.warn({ err: error, ref }, 'package-cache: removing an outdated package failed');
    }
  }

  /** Counters and totals as this process sees them. */
  stats(): PackageCacheStats {
    return {
      entries: this.#index.size,
      bytes: this.#bytes,
      ...this.#counters,
      inUse: this.#inUse,
    };
  }

  /** Stops new acquires and aborts downloads in flight; held leases stay valid until released. */
  async close(): Promise<void> {
    if (this.#closed.signal.aborted) return;
    this.#closed.abort(
      new PackageCacheError('package-cache.closed', 'the package cache is closed'),
    );
    await this.#pruning?.catch(() => {});
    // Our own provider: stop its timers and idle descriptors (held leases stay held).
    this.#ownLocks?.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #checkOpen(): void {
    if (this.#closed.signal.aborted) {
      throw new PackageCacheError('package-cache.closed', 'the package cache is closed');
    }
  }

  /** Takes a lock, fast path first; when it has to wait, explains the wait (and polls progress). */
  async #lock(
    key: string,
    mode: LockMode,
    ref: PackageRef,
    lock: PackageLockKind,
    options: AcquireOptions,
  ): Promise<Lease> {
    const locks = this.#locks;
    const quick = await locks.tryAcquire(key, { mode });
    if (quick) return quick;
    const started = this.#clock.now();
    const progressFile = lock === 'download' ? this.#progressFile(ref) : undefined;
    let lastProgress = -1;
    let progressPid: number | undefined;
    const report = async (done: boolean) => {
      let holder: LockHolder | undefined;
      try {
        holder = done ? undefined : await locks.holder?.(key);
      } catch {
        holder = undefined;
      }
      this.emit('wait', {
        ref,
        lock,
        mode,
        key,
        holder,
        pid: holder?.pid ?? progressPid,
        waitedMs: this.#clock.now() - started,
        done,
      });
    };
    const poll = async () => {
      if (!progressFile) return;
      const p = await readProgress(progressFile);
      if (!p) return;
      progressPid = p.pid;
      if (p.received === lastProgress) return;
      lastProgress = p.received;
      const progress: PackageProgress = { ref, received: p.received, total: p.total, pid: p.pid };
      this.emit('progress', progress);
      options.onProgress?.(progress);
    };
    await poll();
    await report(false);
    const timers: NodeJS.Timeout[] = [];
    const swallow = (p: Promise<void>) => {
      p.catch((e: unknown) => this.#logger.debug({ err: e }, 'package-cache: wait report failed'));
    };
    timers.push(setInterval(() => swallow(report(false)), this.#waitReportMs));
    if (progressFile) timers.push(setInterval(() => swallow(poll()), this.#progressIntervalMs));
    for (const t of timers) t.unref();
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closed.signal])
      : this.#closed.signal;
    try {
      return await locks.acquire(key, { mode, signal });
    } catch (error) {
      if (signal.aborted) throw options.signal?.aborted ? options.signal.reason : signal.reason;
      throw error;
    } finally {
      for (const t of timers) clearInterval(t);
      await report(true);
    }
  }

  /** The installed entry, from memory or the sidecar; `undefined` when the directory is absent. */
  async #lookup(ref: PackageRef): Promise<Entry | undefined> {
    const key = refKey(ref);
    // One local stat: synchronous is several times cheaper than a trip to the thread pool.
    const st = statSync(refPath(this.root, ref), { throwIfNoEntry: false });
    if (!st?.isDirectory()) {
      if (this.#index.has(key)) this.#forget(key);
      return undefined;
    }
    const known = this.#index.get(key);
    if (known) return known;
    const entry = await this.#readEntry(ref);
    if (entry) {
      this.#index.set(key, entry);
      this.#bytes += entry.size;
    }
    return entry;
  }

  async #readEntry(ref: PackageRef): Promise<Entry | undefined> {
    const dir = refPath(this.root, ref);
    const metaFile = metaPath(this.root, ref);
    try {
      const [raw, st] = await Promise.all([readFile(metaFile, 'utf8'), stat(metaFile)]);
      const meta = JSON.parse(raw) as Meta;
      return {
        ref,
        size: meta.size,
        integrity: meta.integrity,
        installedAt: meta.installedAt,
        lastUsed: st.mtimeMs,
        touchedAt: st.mtimeMs,
      };
    } catch {
      // A directory without its sidecar (edited by hand): size it, never trust it for integrity.
      try {
        const st = await stat(dir);
        if (!st.isDirectory()) return undefined;
        const size = await finalizeTree(dir, { durable: false, what: refKey(ref) }).catch(() => 0);
        return {
          ref,
          size,
          integrity: undefined,
          installedAt: st.mtimeMs,
          lastUsed: st.mtimeMs,
          touchedAt: 0,
        };
      } catch {
        return undefined;
      }
    }
  }

  #forget(key: string): void {
    const e = this.#index.get(key);
    if (!e) return;
    this.#index.delete(key);
    this.#bytes -= e.size;
  }

  #touch(entry: Entry): void {
    const now = this.#clock.now();
    entry.lastUsed = now;
    // The index may hold a newer object for this key (refresh() rebuilds it): update both.
    const current = this.#index.get(refKey(entry.ref)); // also bumps recency
    if (current && current !== entry) {
      current.lastUsed = now;
      entry.touchedAt = Math.max(entry.touchedAt, current.touchedAt);
    }
    if (now - entry.touchedAt < this.#touchIntervalMs) return;
    entry.touchedAt = now;
    if (current) current.touchedAt = now;
    const t = new Date(now);
    utimes(metaPath(this.root, entry.ref), t, t).catch((e: unknown) => {
      this.#logger.debug({ err: e, ref: entry.ref }, 'package-cache: could not stamp last use');
    });
  }

  #lease(entry: Entry, usage: Lease, hit: boolean): CachedPackage {
    this.#touch(entry);
    this.#inUse++;
    const key = refKey(entry.ref);
    this.#leases.set(key, (this.#leases.get(key) ?? 0) + 1);
    let released: Promise<void> | undefined;
    const release = (): Promise<void> => {
      released ??= (async () => {
        this.#inUse--;
        const left = (this.#leases.get(key) ?? 1) - 1;
        if (left > 0) this.#leases.set(key, left);
        else this.#leases.delete(key);
        try {
          this.#touch(entry);
        } finally {
          await usage.release();
        }
        // Superseded while in use: the last user (in any process) removes it. Other users make
        // the exclusive try fail; each of them checks again when it releases.
        if (left === 0) await this.#removeIfOutdated(entry.ref);
        if (this.#bytes > this.#maxBytes && !this.#closed.signal.aborted) {
          this.prune().catch((e: unknown) => {
            this.#logger.warn({ err: e }, 'package-cache: automatic prune failed');
          });
        }
      })();
      return released;
    };
    return {
      ref: entry.ref,
      path: refPath(this.root, entry.ref),
      size: entry.size,
      integrity: entry.integrity,
      hit,
      lost: usage.lost,
      release,
      [Symbol.asyncDispose]: release,
    };
  }

  #progressFile(ref: PackageRef): string {
    const h = createHash('sha256').update(refKey(ref)).digest('hex').slice(0, 32);
    return join(this.root, TMP, `progress-${h}.json`);
  }

  /** Fetch → temp dir → verify → extract → fsync → atomic rename. Caller holds the download lock. */
  async #download(ref: PackageRef, options: AcquireOptions): Promise<Entry> {
    const started = this.#clock.now();
    const what = refKey(ref);
    const tmp = join(this.root, TMP, `dl-${process.pid}-${randomBytes(6).toString('hex')}`);
    const progressFile = this.#progressFile(ref);
    const state: ProgressFile = {
      pid: process.pid,
      host: hostname(),
      received: 0,
      startedAt: started,
    };
    let lastWrite = started; // the initial write below: the next one waits an interval
    let writing: Promise<void> = Promise.resolve();
    const progress = (received: number, total?: number) => {
      if (received > state.received) state.received = received;
      if (total !== undefined) state.total = total;
      const p: PackageProgress = {
        ref,
        received: state.received,
        total: state.total,
        pid: process.pid,
      };
      if (this.hasListeners('progress')) this.emit('progress', p);
      options.onProgress?.(p);
      const now = this.#clock.now();
      if (now - lastWrite >= this.#progressIntervalMs) {
        lastWrite = now;
        const body = JSON.stringify(state);
        writing = writing.then(() => writeFile(progressFile, body)).catch(() => {});
      }
    };
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closed.signal])
      : this.#closed.signal;
    try {
      // Independent file-system calls run side by side (each is a thread-pool round trip).
      await Promise.all([mkdir(tmp), writeFile(progressFile, JSON.stringify(state))]);
      let fetched: FetchedPackage;
      try {
        fetched = normalize(
          await raceAbort(
            this.#fetch(ref, { signal, onProgress: (p) => progress(p.received, p.total) }),
            signal,
          ),
        );
      } catch (error) {
        if (signal.aborted) throw options.signal?.aborted ? options.signal.reason : signal.reason;
        if (RiggingError.isInstance(error)) throw error;
        throw new PackageCacheError(
          'package-cache.fetch_failed',
          `fetching ${what} failed: ${String((error as Error)?.message ?? error)}`,
          {
            cause: error,
          },
        );
      }
      if ('stream' in fetched && fetched.size !== undefined) state.total = fetched.size;
      const target = join(tmp, 'pkg');
      const parent = join(this.root, ref.fqn, ref.version);
      // Nothing removes version directories, so the parent can be made while extracting.
      const parentReady = mkdir(parent, { recursive: true });
      parentReady.catch(() => {}); // awaited below; extraction errors take precedence
      const { integrity } = await materialize(fetched, {
        target,
        scratch: tmp,
        algorithm: this.#algorithm,
        signal,
        what,
        limits: this.#limits,
        onBytes: (n) => progress(n),
      });
      const size = await finalizeTree(target, { durable: this.#durable, what });
      const installedAt = this.#clock.now();
      const meta: Meta = { ...ref, size, integrity, installedAt };
      const final = refPath(this.root, ref);
      const metaTmp = join(tmp, 'meta.json');
      await Promise.all([
        parentReady,
        (async () => {
          await writeFile(metaTmp, JSON.stringify(meta));
          if (this.#durable) await fsyncPath(metaTmp);
        })(),
        // A marker left from an earlier install of this id does not apply to this one.
        unlinkIfAny(outdatedPath(this.root, ref)),
      ]);
      // Sidecar first (harmless alone), then the directory: the rename is the commit point.
      await rename(metaTmp, metaPath(this.root, ref));
      await rename(target, final);
      if (this.#durable) await fsyncPath(parent);
      const entry: Entry = {
        ref,
        size,
        integrity,
        installedAt,
        lastUsed: installedAt,
        touchedAt: installedAt,
      };
      this.#forget(refKey(ref));
      this.#index.set(refKey(ref), entry);
      this.#bytes += size;
      this.#counters.downloads++;
      this.emit('download', {
        ref,
        path: final,
        size,
        integrity,
        durationMs: this.#clock.now() - started,
      });
      return entry;
    } finally {
      await writing;
      await Promise.all([
        unlinkIfAny(progressFile),
        // Emptied by the renames after a success: one rmdir instead of a recursive walk.
        rmdir(tmp).catch(() => rm(tmp, { recursive: true, force: true })),
      ]);
    }
  }

  /** Removes outdated ids of the same fqn/version (and, by policy, older versions), then prunes. */
  async #afterDownload(ref: PackageRef): Promise<void> {
    try {
      const versionDir = join(this.root, ref.fqn, ref.version);
      for (const id of await dirNames(versionDir)) {
        if (id !== ref.id) await this.#markAndRemove({ ...ref, id }, 'outdated');
      }
      if (this.#olderVersions === 'remove') {
        const mine = this.#index.get(refKey(ref))?.installedAt ?? this.#clock.now();
        for (const version of await dirNames(join(this.root, ref.fqn))) {
          if (version === ref.version) continue;
          for (const id of await dirNames(join(this.root, ref.fqn, version))) {
            const other = { fqn: ref.fqn, version, id };
            const e = await this.#readEntry(other);
            if (e && e.installedAt <= mine) await this.#markAndRemove(other, 'older-version');
          }
        }
      }
      if (this.#bytes > this.#maxBytes || Number.isFinite(this.#idleTtlMs)) await this.prune();
    } catch (error) {
      this.#logger.warn({ err: error, ref }, 'package-cache: cleanup after download failed');
    }
  }

  /**
   * Marks a superseded package, then removes it if nobody uses it. Marking first closes the race
   * with a user releasing it meanwhile: either the user's release sees the marker (and removes
   * it), or it released before our exclusive try (which then succeeds).
   */
  async #markAndRemove(ref: PackageRef, reason: 'outdated' | 'older-version'): Promise<void> {
    await writeFile(outdatedPath(this.root, ref), reason);
    await this.#tryRemove(ref, reason);
  }

  /** Removes a package if its exclusive usage lock is free right now. */
  async #tryRemove(
    ref: PackageRef,
    reason: PackageCacheEvents['remove']['reason'],
  ): Promise<boolean> {
    const key = refKey(ref);
    const lease = await this.#locks.tryAcquire(`usage:${key}`, { mode: 'exclusive' });
    if (!lease) return false;
    let size = 0;
    try {
      const dir = refPath(this.root, ref);
      const trash = join(this.root, TMP, `trash-${process.pid}-${randomBytes(6).toString('hex')}`);
      try {
        await rename(dir, trash);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
          this.#forget(key);
          await unlinkIfAny(outdatedPath(this.root, ref));
          return false;
        }
        throw error;
      }
      size = this.#index.get(key)?.size ?? 0;
      this.#forget(key);
      await Promise.all([
        unlinkIfAny(metaPath(this.root, ref)),
        unlinkIfAny(outdatedPath(this.root, ref)),
      ]);
      await rm(trash, { recursive: true, force: true });
    } finally {
      await lease.release();
    }
    if (reason === 'evicted' || reason === 'idle') this.#counters.evictions++;
    this.emit('remove', { ref, reason, size });
    return true;
  }

  /** Removes temp dirs, trash and progress files left by processes that are gone. */
  async #sweep(): Promise<void> {
    const dir = join(this.root, TMP);
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const path = join(dir, name);
      let pid: number | undefined;
      const m = /^(?:dl|trash)-(\d+)-/.exec(name);
      if (m) pid = Number(m[1]);
      else if (name.startsWith('progress-')) pid = (await readProgress(path))?.pid ?? 0;
      else continue;
      if (pid !== undefined && (pid === process.pid || isProcessAlive(pid))) continue;
      this.#logger.info({ path }, 'package-cache: removing leftover of a dead process');
      await rm(path, { recursive: true, force: true });
    }
    // Sidecars whose directory never got renamed into place (crash between the two renames).
    for (const fqn of await dirNames(this.root)) {
      for (const version of await dirNames(join(this.root, fqn))) {
        const vdir = join(this.root, fqn, version);
        for (const name of await readdir(vdir).catch(() => [] as string[])) {
          const m = /^\.(.+)\.json$/.exec(name);
          if (!m || !isSegment(m[1]!)) continue;
          const ref = { fqn, version, id: m[1]! };
          const exists = await stat(refPath(this.root, ref)).then(
            () => true,
            () => false,
          );
          if (exists) continue;
          const lease = await this.#locks.tryAcquire(`download:${refKey(ref)}`, {
            mode: 'exclusive',
          });
          if (!lease) continue;
          try {
            const still = await stat(refPath(this.root, ref)).then(
              () => true,
              () => false,
            );
            if (!still) await unlink(join(vdir, name)).catch(() => {});
          } finally {
            await lease.release();
          }
        }
      }
    }
  }
}

function normalize(result: FetchResult): FetchedPackage {
  if (typeof result === 'string') return { path: result };
  if (result instanceof Uint8Array) return { buffer: result };
  if (typeof result === 'object' && result !== null) {
    if ('stream' in result || 'buffer' in result || 'path' in result) return result;
    if (Symbol.asyncIterator in result || 'getReader' in result) return { stream: result };
  }
  throw new TypeError(
    'fetch must return { stream | buffer | path, integrity? }, bytes, a stream or a path',
  );
}

const OWNER = 'PackageCache';

/** A cap or TTL: a number >= 0 (0: keep nothing unused), or `Infinity` (no bound). */
function boundOption(owner: string, name: string, value: unknown, fallback: number): number {
  return value === Infinity ? value : nonNegativeOption(owner, name, value, fallback);
}

async function readProgress(path: string): Promise<ProgressFile | undefined> {
  try {
    const p = JSON.parse(await readFile(path, 'utf8')) as ProgressFile;
    return typeof p.pid === 'number' && typeof p.received === 'number' ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Names of valid ref segments that are directories under `dir`. */
async function dirNames(dir: string): Promise<string[]> {
  try {
    const out: string[] = [];
    for (const d of await readdir(dir, { withFileTypes: true })) {
      if (d.isDirectory() && isSegment(d.name)) out.push(d.name);
    }
    return out;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

function defaultLocks(root: string): TwoLevelLock {
  return new TwoLevelLock({ dir: join(root, '.locks') });
}

/** Removes a file if it is there: one system call, where `rm({ force: true })` makes three. */
async function unlinkIfAny(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
