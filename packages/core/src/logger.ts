/** One logging method, with pino's two call shapes. */
export interface LogFn {
  (obj: object, msg?: string, ...args: unknown[]): void;
  (msg: string, ...args: unknown[]): void;
}

/**
 * The logger every package accepts: a structural subset of pino's, so a pino logger (or any
 * pino-compatible one) can be passed as is. Libraries never log with `console`.
 */
export interface Logger {
  /** Logs at level `trace` (10 in pino). */
  trace: LogFn;
  /** Logs at level `debug` (20). */
  debug: LogFn;
  /** Logs at level `info` (30). */
  info: LogFn;
  /** Logs at level `warn` (40). */
  warn: LogFn;
  /** Logs at level `error` (50). */
  error: LogFn;
  /** Logs at level `fatal` (60). */
  fatal: LogFn;
  /** A logger that adds `bindings` to every record it writes. */
  child(bindings: Record<string, unknown>): Logger;
}

const noop: LogFn = () => {};

/** A logger that drops everything (the default everywhere). */
export const silentLogger: Logger = Object.freeze({
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  fatal: noop,
  child: () => silentLogger,
});
