// A better-sqlite3 connection as this package uses it, and the statement cache in front of it.
// Types only flow out of this module: it imports nothing of the package.

/** better-sqlite3's `Database` constructor, as far as we use it. @internal */
export type SqliteCtor = new (filename: string, options?: Record<string, unknown>) => SqliteHandle;
/** A better-sqlite3 connection, as far as we use it. @internal */
export interface SqliteHandle {
  pragma(source: string, options?: { simple?: boolean }): unknown;
  prepare(source: string): SqliteStatement;
  close(): void;
  readonly open: boolean;
}
interface SqliteStatement {
  readonly reader: boolean;
  /** True while an iterator over the statement is open (better-sqlite3). */
  readonly busy?: boolean;
}

/**
 * The handle Kysely's SQLite driver sees: `prepare(sql)` returns a cached statement for SQL text
 * it has seen (bounded, least recently used evicted). A statement still being iterated (a
 * streaming query) is never handed out twice: a fresh one is prepared instead. better-sqlite3
 * re-prepares a statement by itself after a schema change.
 */
export function cachingSqliteHandle(handle: SqliteHandle, size: number): SqliteHandle {
  if (size <= 0) return handle;
  const cache = new Map<string, SqliteStatement>();
  return {
    pragma: (source, options) => handle.pragma(source, options),
    prepare(source) {
      const hit = cache.get(source);
      if (hit && !hit.busy) {
        // Refresh its place in the LRU order.
        cache.delete(source);
        cache.set(source, hit);
        return hit;
      }
      const stmt = handle.prepare(source);
      if (!hit) {
        cache.set(source, stmt);
        if (cache.size > size) cache.delete(cache.keys().next().value!);
      }
      return stmt;
    },
    close() {
      cache.clear();
      handle.close();
    },
    get open() {
      return handle.open;
    },
  };
}
