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
  trace: LogFn;
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  fatal: LogFn;
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
