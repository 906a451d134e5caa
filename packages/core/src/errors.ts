import type { Json } from './json.js';

const BRAND = Symbol.for('rigging.error');

/** Options accepted by every {@link RiggingError}. */
export interface RiggingErrorOptions {
  /** The underlying error, kept as `error.cause`. */
  cause?: unknown;
  /** Machine-readable context (ids, expected vs actual, …); must be JSON. */
  details?: Json;
}

/**
 * The one base error of rigging. `code` is stable (`locks.timeout`, `sql.driver_missing`, …) and
 * is what callers should branch on; `message` is for people.
 *
 * Checks survive duplicate copies of this package: use {@link RiggingError.isInstance} rather
 * than `instanceof` across package boundaries.
 */
export class RiggingError<C extends string = string> extends Error {
  /** The class name (`'RiggingError'`, or the subclass's: `'LocksError'`, `'SqlError'`, …). */
  override readonly name: string = 'RiggingError';
  /** Stable machine-readable code, prefixed by the package that throws it (`locks.timeout`). */
  readonly code: C;
  /** Machine-readable context given at construction, if any. */
  readonly details: Json | undefined;

  /**
   * @param code - the stable code (`<package>.<reason>`)
   * @param message - a sentence for people
   * @param options - `cause` (kept as `error.cause`) and JSON `details`
   */
  constructor(code: C, message: string, options: RiggingErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    Object.defineProperty(this, BRAND, { value: true, enumerable: false });
    this.code = code;
    this.details = options.details;
  }

  /** True for any RiggingError, from any copy of `@rigging/core`. */
  static isInstance(error: unknown): error is RiggingError {
    return (
      typeof error === 'object' &&
      error !== null &&
      (error as { [BRAND]?: unknown })[BRAND] === true
    );
  }

  /** True when `error` is a RiggingError with the given code. */
  static hasCode<C extends string>(error: unknown, code: C): error is RiggingError<C> {
    return RiggingError.isInstance(error) && error.code === code;
  }

  /**
   * The error as JSON (name, code, message, details), so `JSON.stringify(error)` keeps what a
   * caller branches on. The cause chain is not included; see {@link serializeError}.
   */
  toJSON(): {
    /** The error's `name`. */
    name: string;
    /** The error's stable `code`. */
    code: C;
    /** `error.message`. */
    message: string;
    /** The error's `details`, when present. */
    details?: Json;
  } {
    return {
      name: this.name,
      code: this.code,
      message: this.message,
      ...(this.details === undefined ? {} : { details: this.details }),
    };
  }
}

/** Turns anything thrown into an Error (strings and other values are wrapped). */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === 'string' ? value : safeString(value), { cause: value });
}

function safeString(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A JSON description of an error, for logs and durable records (name, message, code, cause chain). */
export interface SerializedError {
  /** `error.name`. */
  name: string;
  /** `error.message`. */
  message: string;
  /** `error.code` when it is a string (every {@link RiggingError}, Node system errors). */
  code?: string;
  /** {@link RiggingError.details}, when present. */
  details?: Json;
  /** `error.stack`, when present. */
  stack?: string;
  /** The serialized `error.cause`, down to the depth limit. */
  cause?: SerializedError;
}

/** Serializes an error and its cause chain (depth-limited) into JSON. */
export function serializeError(value: unknown, depth = 5): SerializedError {
  const error = toError(value);
  const out: SerializedError = { name: error.name, message: error.message };
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') out.code = code;
  if (RiggingError.isInstance(error) && error.details !== undefined) out.details = error.details;
  if (error.stack) out.stack = error.stack;
  if (error.cause !== undefined && depth > 0) out.cause = serializeError(error.cause, depth - 1);
  return out;
}
