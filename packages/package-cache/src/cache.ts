import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdir, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { TwoLevelLock } from '@rigging/locks';
import {
  TypedEmitter,
  nonNegativeOption,
  positiveOption,
  silentLogger,
  systemClock,
  throwIfAborted,
  type Clock,
  type Lease,
  type LockMode,
  type LockProvider,
  type Logger,
} from '@rigging/core';
import { TMP, dirNames, progressFilePath, readEntry, sweepLeftovers, unlinkIfAny } from './disk.js';
import { PackageCacheError } from './errors.js';
import { installPackage } from './install.js';
import { waitExplained } from './lock-wait.js';
import { isIntegrityAlgorithm, type IntegrityAlgorithm } from './integrity.js';
import { resolveLimits, type ResolvedLimits } from './limits.js';
import { PackageIndex } from './lru-index.js';
import { metaPath, outdatedPath, refKey, refPath, validateRef, type PackageRef } from './ref.js';
import type {
  AcquireOptions,
  CachedPackage,
  EntriesOptions,
  Entry,
  PackageCacheEvents,
  PackageCacheOptions,
  PackageCacheStats,
  PackageEntry,
  PackageFetcher,
  PackageLockKind,
  PruneOptions,
  PruneResult,
} from './types.js';

/**
 * A shared on-disk package cache. Any number of caches in any number of processes may share one
 * `root`: usage locks keep packages in use on disk, download locks make exactly one of them fetch.
 */
export class PackageCache extends TypedEmitter<PackageCacheEvents> {
  /** The cache directory (the `root` option, resolved to an absolute path). */
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
  readonly #index = new PackageIndex();
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
      await sweepLeftovers(this.root, this.#locks, this.#logger);
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
      // Least recently used first.
      for (const entry of this.#index.leastRecentFirst()) {
        const idle = now - entry.lastUsed > idleTtlMs;
        const over = this.#index.bytes > maxBytes;
        if (!idle && !over) continue;
        if (await this.#tryRemove(entry.ref, idle ? 'idle' : 'evicted')) removed.push(entry.ref);
        else if (this.#index.has(refKey(entry.ref))) inUse.push(entry.ref);
      }
      return { removed, inUse, entries: this.#index.size, bytes: this.#index.bytes };
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
          const entry = await readEntry(this.root, ref);
          if (entry) found.push(entry);
        }
      }
    }
    this.#index.rebuild(found);
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
    for (const e of this.#index.mostRecentFirst()) {
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
      bytes: this.#index.bytes,
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

  /** The same as {@link PackageCache.close}, for `await using`. */
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
    const quick = await this.#locks.tryAcquire(key, { mode });
    if (quick) return quick;
    return waitExplained(
      {
        locks: this.#locks,
        clock: this.#clock,
        logger: this.#logger,
        waitReportMs: this.#waitReportMs,
        progressIntervalMs: this.#progressIntervalMs,
        closed: this.#closed.signal,
        onWait: (w) => this.emit('wait', w),
        onProgress: (p) => this.emit('progress', p),
        progressFile: lock === 'download' ? progressFilePath(this.root, ref) : undefined,
      },
      { key, mode, ref, lock },
      options,
    );
  }

  /** The installed entry, from memory or the sidecar; `undefined` when the directory is absent. */
  async #lookup(ref: PackageRef): Promise<Entry | undefined> {
    const key = refKey(ref);
    // One local stat: synchronous is several times cheaper than a trip to the thread pool.
    const st = statSync(refPath(this.root, ref), { throwIfNoEntry: false });
    if (!st?.isDirectory()) {
      this.#index.forget(key);
      return undefined;
    }
    const known = this.#index.get(key);
    if (known) return known;
    const entry = await readEntry(this.root, ref);
    if (entry) this.#index.add(entry);
    return entry;
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
        if (this.#index.bytes > this.#maxBytes && !this.#closed.signal.aborted) {
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

  /** Installs a missing package (the caller holds its download lock) and indexes it. */
  async #download(ref: PackageRef, options: AcquireOptions): Promise<Entry> {
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closed.signal])
      : this.#closed.signal;
    const { entry, durationMs } = await installPackage(ref, {
      root: this.root,
      fetch: this.#fetch,
      algorithm: this.#algorithm,
      limits: this.#limits,
      durable: this.#durable,
      clock: this.#clock,
      progressIntervalMs: this.#progressIntervalMs,
      signal,
      callerSignal: options.signal,
      onProgress: (p) => {
        if (this.hasListeners('progress')) this.emit('progress', p);
        options.onProgress?.(p);
      },
    });
    this.#index.add(entry);
    this.#counters.downloads++;
    const { size, integrity } = entry;
    this.emit('download', { ref, path: refPath(this.root, ref), size, integrity, durationMs });
    return entry;
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
            const e = await readEntry(this.root, other);
            if (e && e.installedAt <= mine) await this.#markAndRemove(other, 'older-version');
          }
        }
      }
      if (this.#index.bytes > this.#maxBytes || Number.isFinite(this.#idleTtlMs))
        await this.prune();
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
          this.#index.forget(key);
          await unlinkIfAny(outdatedPath(this.root, ref));
          return false;
        }
        throw error;
      }
      size = this.#index.forget(key)?.size ?? 0;
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
}

const OWNER = 'PackageCache';

/** A cap or TTL: a number >= 0 (0: keep nothing unused), or `Infinity` (no bound). */
function boundOption(owner: string, name: string, value: unknown, fallback: number): number {
  return value === Infinity ? value : nonNegativeOption(owner, name, value, fallback);
}

function defaultLocks(root: string): TwoLevelLock {
  return new TwoLevelLock({ dir: join(root, '.locks') });
}
