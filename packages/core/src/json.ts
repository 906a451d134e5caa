/** Any value that survives `JSON.stringify` → `JSON.parse` unchanged. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** A JSON object. */
export type JsonObject = { [key: string]: Json };

/**
 * Explains why `value` is not JSON (a path and a reason), or returns `undefined` when it is.
 * Rejects `undefined`, functions, symbols, bigints, non-finite numbers, cycles and class
 * instances other than plain objects and arrays. A scalar is checked without allocating.
 */
export function explainNotJson(value: unknown, path = '$'): string | undefined {
  return typeof value === 'object' && value !== null
    ? walk(value, path, new Set<object>())
    : scalar(value, path);
}

/** Why scalar `v` (anything but a non-null object) at `p` is not JSON, if it is not. */
function scalar(v: unknown, p: string): string | undefined {
  switch (typeof v) {
    case 'boolean':
    case 'string':
      return undefined;
    case 'number':
      return Number.isFinite(v) ? undefined : `${p} is ${String(v)}`;
    case 'object': // null
      return undefined;
    default:
      return `${p} is ${typeof v}`;
  }
}

/** Why `v` at `p` is not JSON, if it is not; `seen` holds the arrays and objects above it. */
function walk(v: unknown, p: string, seen: Set<object>): string | undefined {
  if (typeof v !== 'object' || v === null) return scalar(v, p);
  if (seen.has(v)) return `${p} is a circular reference`;
  if (Array.isArray(v)) {
    seen.add(v);
    for (let i = 0; i < v.length; i++) {
      const r = walk(v[i], `${p}[${i}]`, seen);
      if (r) return r;
    }
    seen.delete(v);
    return undefined;
  }
  const proto = Object.getPrototypeOf(v) as unknown;
  if (proto !== Object.prototype && proto !== null) {
    const name = (v as { constructor?: { name?: string } }).constructor?.name ?? 'object';
    return `${p} is a ${name}, not a plain object`;
  }
  seen.add(v);
  for (const [k, child] of Object.entries(v)) {
    const r = walk(child, `${p}.${k}`, seen);
    if (r) return r;
  }
  seen.delete(v);
  return undefined;
}

/** True when `value` is JSON (see {@link explainNotJson}). */
export function isJson(value: unknown): value is Json {
  return explainNotJson(value) === undefined;
}
