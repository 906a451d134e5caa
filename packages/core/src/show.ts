/**
 * A value as an error message shows it: strings quoted (and cut after 200 characters), bigints
 * with their `n`, numbers and symbols as `String()` does, anything else as JSON where it can be, else `String()`.
 * Every package's `TypeError` for a bad option or argument names the value this way.
 * @example showValue('x') // '"x"'
 * @example showValue(3n) // '3n'
 */
export function showValue(value: unknown): string {
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 200 ? value.slice(0, 200) + '…' : value);
  }
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'symbol') return value.toString();
  if (typeof value === 'number') return String(value); // NaN, Infinity and -0 stay themselves
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
