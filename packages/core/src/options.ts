/**
 * Option validators shared by every package, so one option means one rule everywhere: a bad value
 * throws a `TypeError` that names the option, its owner and the value, before anything changes.
 */

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  return String(value);
}

function check(
  owner: string,
  name: string,
  value: unknown,
  ok: (n: number) => boolean,
  rule: string,
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value)) {
    throw new TypeError(`${owner}: ${name} must be ${rule}, got ${describe(value)}`);
  }
  return value;
}

/**
 * A finite number > 0, or `fallback` when `value` is `undefined`.
 * @example positiveOption('Queue', 'pollMs', options.pollMs, 1000)
 */
export function positiveOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
): number;
export function positiveOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: undefined,
): number | undefined;
export function positiveOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: number,
): number | undefined {
  if (value === undefined) return fallback;
  return check(owner, name, value, (n) => n > 0, 'a finite number > 0');
}

/** A finite number >= 0, or `fallback` when `value` is `undefined`. */
export function nonNegativeOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
): number;
export function nonNegativeOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: undefined,
): number | undefined;
export function nonNegativeOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: number,
): number | undefined {
  if (value === undefined) return fallback;
  return check(owner, name, value, (n) => n >= 0, 'a finite number >= 0');
}

/** An integer >= 1, or `fallback` when `value` is `undefined`. */
export function positiveIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
): number;
export function positiveIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: undefined,
): number | undefined;
export function positiveIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: number,
): number | undefined {
  if (value === undefined) return fallback;
  return check(owner, name, value, (n) => Number.isInteger(n) && n >= 1, 'an integer >= 1');
}

/** An integer >= 0, or `fallback` when `value` is `undefined`. */
export function nonNegativeIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
): number;
export function nonNegativeIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: undefined,
): number | undefined;
export function nonNegativeIntegerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback?: number,
): number | undefined {
  if (value === undefined) return fallback;
  return check(owner, name, value, (n) => Number.isInteger(n) && n >= 0, 'an integer >= 0');
}

/**
 * A wait's `timeoutMs`: `undefined` (wait forever), or a number >= 0 (`Infinity` allowed, 0 means
 * "do not wait"). Validated on every call, contended or not.
 */
export function timeoutOption(owner: string, value: unknown): number | undefined {
  if (value === undefined || value === Infinity) return value;
  return check(owner, 'timeoutMs', value, (n) => n >= 0, 'a number >= 0 (or Infinity)');
}
