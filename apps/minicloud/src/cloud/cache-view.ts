import type { Clock } from '@rigging/core';
import {
  refKey,
  type CachedPackage,
  type PackageCache,
  type PackageRef,
} from '@rigging/package-cache';
import type { Database } from '@rigging/sql';
import type { CacheEntry, CacheLockHolder } from '../wire.js';
import { MinicloudError } from '../errors.js';
import type { MinicloudTables } from '../migrations.js';
import type { CloudHub } from './events.js';
import type { PackageRepository } from './repository.js';

/** Counters of the package cache as the app sees them. */
export interface CacheCounters {
  hits: number;
  misses: number;
  downloads: number;
  removed: { ref: PackageRef; reason: string }[];
}

/**
 * The package cache as this process uses and shows it: acquires and releases packages for
 * environments, counts hits, misses, downloads and removals, and keeps what the dashboard's
 * cache panel shows (entries with their in-use counts, and the cache's locks as this process
 * knows them: its usage leases, its downloads and the holders it waits for elsewhere).
 * @internal
 */
export class CacheView {
  /** Hits, misses, downloads and removals seen by this process. */
  readonly counters: CacheCounters = { hits: 0, misses: 0, downloads: 0, removed: [] };
  readonly #packages: PackageCache;
  readonly #repository: PackageRepository;
  readonly #database: Database<MinicloudTables>;
  readonly #hub: CloudHub;
  readonly #clock: Clock;
  readonly #capBytes: number;
  readonly #entries = new Map<string, CacheEntry>();
  /** Leases this process holds per ref key. */
  readonly #inUse = new Map<string, number>();
  /** Lock holders by `usage:<ref>`, `download:<ref>` or `wait:<lock key>`. */
  readonly #holders = new Map<string, CacheLockHolder>();

  constructor(options: {
    packages: PackageCache;
    repository: PackageRepository;
    database: Database<MinicloudTables>;
    hub: CloudHub;
    clock: Clock;
    capBytes: number;
  }) {
    this.#packages = options.packages;
    this.#repository = options.repository;
    this.#database = options.database;
    this.#hub = options.hub;
    this.#clock = options.clock;
    this.#capBytes = options.capBytes;
    this.#listen();
  }

  /** Publishes the cache state (`cache:update`). */
  publish(): void {
    const stats = this.#packages.stats();
    this.#hub.publish({
      type: 'cache:update',
      cache: {
        capBytes: this.#capBytes,
        bytesUsed: stats.bytes,
        hits: this.counters.hits,
        misses: this.counters.misses,
        entries: [...this.#entries.values()].map((e) => ({
          ...e,
          inUse: this.#inUse.get(refKey(e)) ?? 0,
        })),
        locks: [...this.#holders.values()],
      },
    });
  }

  /** Counts a deployment's or prefetch's cache lookup and publishes the counters. */
  count(hit: boolean): void {
    if (hit) this.counters.hits++;
    else this.counters.misses++;
    this.publish();
  }

  /** Acquires the current upload of `fqn`/`version` (`minicloud.package_not_found` if none). */
  async acquire(fqn: string, version: string, signal?: AbortSignal): Promise<CachedPackage> {
    const current = await this.#repository.current(fqn, version);
    if (!current) {
      throw new MinicloudError(
        'minicloud.package_not_found',
        `package ${fqn} ${version} is not in the repository; upload it first`,
      );
    }
    return this.acquireRef({ fqn, version, id: current.id }, signal);
  }

  /** Acquires one exact upload (a takeover keeps the package its first owner deployed with). */
  async acquireRef(ref: PackageRef, signal?: AbortSignal): Promise<CachedPackage> {
    const pkg = await this.#packages.acquire(ref, signal ? { signal } : {});
    const k = refKey(ref);
    const n = (this.#inUse.get(k) ?? 0) + 1;
    this.#inUse.set(k, n);
    const key = `usage:${k}`;
    this.#hold(key, {
      key,
      pid: process.pid,
      mode: 'shared',
      since: this.#holders.get(key)?.since ?? this.#clock.now(),
      owner: `${n} lease(s) in this process`,
    });
    this.publish();
    return pkg;
  }

  /** Releases a package acquired here (the cache may drop an outdated copy on its last release). */
  async release(pkg: CachedPackage): Promise<void> {
    await pkg.release();
    const k = refKey(pkg.ref);
    const n = Math.max(0, (this.#inUse.get(k) ?? 1) - 1);
    this.#inUse.set(k, n);
    const held = this.#holders.get(`usage:${k}`);
    if (n === 0) this.#hold(`usage:${k}`, undefined);
    else if (held) held.owner = `${n} lease(s) in this process`;
    this.publish();
  }

  /** Removes `ref` from the cache when it is outdated and no environment uses it any more. */
  async cleanOutdated(ref: PackageRef): Promise<boolean> {
    const current = await this.#repository.current(ref.fqn, ref.version);
    if (current?.id === ref.id) return false;
    const users = await this.#database.db
      .selectFrom('minicloud_environments')
      .select('name')
      .where('package', '=', refKey(ref))
      .execute();
    if (users.length > 0) return false;
    return this.#packages.remove(ref);
  }

  #hold(key: string, holder: CacheLockHolder | undefined): void {
    if (holder) this.#holders.set(key, holder);
    else this.#holders.delete(key);
  }

  #listen(): void {
    const packages = this.#packages;
    packages.on('wait', (w) => {
      this.#hold(
        `wait:${w.key}`,
        w.done
          ? undefined
          : {
              key: w.key,
              pid: w.pid ?? null,
              mode: w.lock === 'download' ? 'exclusive' : 'shared',
              since: this.#clock.now() - w.waitedMs,
              owner: `another process (waited for ${w.waitedMs} ms)`,
            },
      );
      this.publish();
    });
    packages.on('hit', (e) => {
      const k = refKey(e.ref);
      const bytes = this.#entries.get(k)?.bytes ?? 0;
      this.#entries.set(k, { ...e.ref, bytes, inUse: 0, lastUsedAt: this.#clock.now() });
    });
    packages.on('download', (e) => {
      const k = refKey(e.ref);
      this.counters.downloads++;
      this.#hold(`download:${k}`, undefined);
      this.#entries.set(k, { ...e.ref, bytes: e.size, inUse: 0, lastUsedAt: this.#clock.now() });
      this.#hub.publish({ type: 'cache:download-done', id: k });
    });
    packages.on('progress', (p) => {
      const k = refKey(p.ref);
      const key = `download:${k}`;
      if (p.pid === process.pid && !this.#holders.has(key)) {
        this.#hold(key, {
          key,
          pid: process.pid,
          mode: 'exclusive',
          since: this.#clock.now(),
          owner: 'download',
        });
        this.publish();
      }
      this.#hub.publish({
        type: 'cache:download',
        download: {
          id: k,
          fqn: p.ref.fqn,
          version: p.ref.version,
          bytesDone: p.received,
          bytesTotal: p.total ?? null,
        },
      });
    });
    packages.on('remove', (e) => {
      this.counters.removed.push({ ref: e.ref, reason: e.reason });
      this.#entries.delete(refKey(e.ref));
      this.publish();
    });
  }
}
