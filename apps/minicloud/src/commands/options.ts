import { UsageError } from '../errors.js';

/** An integer option from `min` to `max` (`--lease-ms 2000`); undefined when not given. */
export function intOption(
  values: Record<string, unknown>,
  name: string,
  min: number,
  max: number,
): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || n < min || n > max) {
    throw new UsageError(
      `--${name} must be an integer from ${min} to ${max}, got '${String(raw)}'`,
    );
  }
  return n;
}
