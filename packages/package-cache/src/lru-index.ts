import { refKey } from './ref.js';
import type { Entry } from './types.js';

/**
 * This process's index of installed packages, in least-recently-used order, with their total
 * size: what eviction walks. Rebuilt from disk by `PackageCache.refresh()`. A `Map` in recency
 * order (a use moves its entry to the end): nothing allocated up front, whatever the number of
 * packages. @internal
 */
export class PackageIndex {
  readonly #entries = new Map<string, Entry>();
  #bytes = 0;

  /** Packages indexed. */
  get size(): number {
    return this.#entries.size;
  }

  /** Their total size in bytes. */
  get bytes(): number {
    return this.#bytes;
  }

  /** The entry of `key`, marking it most recently used. */
  get(key: string): Entry | undefined {
    const e = this.#entries.get(key);
    if (e) {
      this.#entries.delete(key);
      this.#entries.set(key, e);
    }
    return e;
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /** Adds (or replaces) an entry as the most recently used. */
  add(entry: Entry): void {
    const key = refKey(entry.ref);
    this.forget(key);
    this.#entries.set(key, entry);
    this.#bytes += entry.size;
  }

  /** Drops an entry; returns it. */
  forget(key: string): Entry | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    this.#entries.delete(key);
    this.#bytes -= e.size;
    return e;
  }

  /** Least recently used first. */
  leastRecentFirst(): Entry[] {
    return [...this.#entries.values()];
  }

  /** Most recently used first. */
  mostRecentFirst(): Entry[] {
    return [...this.#entries.values()].reverse();
  }

  /**
   * Replaces the index with `found` (read from disk), ordered by last use; what this process
   * knows wins: a later last use, and its recency order to break ties.
   */
  rebuild(found: Entry[]): void {
    const known = this.#entries;
    const rank = new Map<string, number>();
    let i = 0;
    for (const key of known.keys()) rank.set(key, i++);
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
}
