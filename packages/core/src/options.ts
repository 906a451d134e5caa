/**
 * Option validators shared by every package, so one option means one rule everywhere: a bad value
 * throws a `TypeError` that names the option, its owner and the value, before anything changes.
 */
import { showValue } from './show.js';

function check(
  owner: string,
  name: string,
  value: unknown,
  ok: (n: number) => boolean,
  rule: string,
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value)) {
    throw new TypeError(`${owner}: ${name} must be ${rule}, got ${showValue(value)}`);
  }
  return value;
}

/**
 * A validator of one rule: returns `value` when it holds, `fallback` when `value` is `undefined`,
 * and throws a `TypeError` naming `owner`, `name` and the value otherwise.
 */
export interface OptionValidator {
  (owner: string, name: string, value: unknown, fallback: number): number;
  (owner: string, name: string, value: unknown, fallback?: undefined): number | undefined;
}

function validator(rule: string, ok: (n: number) => boolean): OptionValidator {
  return ((owner: string, name: string, value: unknown, fallback?: number) =>
    value === undefined ? fallback : check(owner, name, value, ok, rule)) as OptionValidator;
}

/**
 * A finite number > 0, or `fallback` when `value` is `undefined`.
 * @example positiveOption('Queue', 'pollMs', options.pollMs, 1000)
 */
export const positiveOption = validator('a finite number > 0', (n) => n > 0);

/** A finite number >= 0, or `fallback` when `value` is `undefined`. */
export const nonNegativeOption = validator('a finite number >= 0', (n) => n >= 0);

/** An integer >= 1, or `fallback` when `value` is `undefined`. */
export const positiveIntegerOption = validator(
  'an integer >= 1',
  (n) => Number.isInteger(n) && n >= 1,
);

/** An integer >= 0, or `fallback` when `value` is `undefined`. */
export const nonNegativeIntegerOption = validator(
  'an integer >= 0',
  (n) => Number.isInteger(n) && n >= 0,
);

/**
 * A wait's `timeoutMs`: `undefined` (wait forever), or a number >= 0 (`Infinity` allowed, 0 means
 * "do not wait"). Validated on every call, contended or not.
 */
export function timeoutOption(owner: string, value: unknown): number | undefined {
  if (value === undefined || value === Infinity) return value;
  return check(owner, 'timeoutMs', value, (n) => n >= 0, 'a number >= 0 (or Infinity)');
}
