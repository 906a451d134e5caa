/**
 * Objects keyed by request input. They have no prototype, so a key such as `__proto__` or
 * `constructor` is an ordinary entry: it cannot change the object's prototype or hide behind an
 * inherited property.
 */

/** An empty object without a prototype, for keys that come from a request. @internal */
export function dict<T>(): Record<string, T> {
  return Object.create(null) as Record<string, T>;
}

/** `entries` as an object without a prototype. @internal */
export function dictOf<T>(entries: Iterable<readonly [string, T]>): Record<string, T> {
  const out = dict<T>();
  for (const [key, value] of entries) out[key] = value;
  return out;
}
