// Test helper: a logger that keeps what it is given at one level.
import { silentLogger, type LogFn, type Logger } from '@rigging/core';

/** A logger that keeps in `messages` the messages it is given at `level`, and drops the rest. */
export function recordingLogger(
  level: 'debug' | 'warn',
  messages: string[] = [],
): Logger & { messages: string[] } {
  const record: LogFn = (obj: unknown, msg?: unknown) => {
    messages.push(typeof obj === 'string' ? obj : String(msg ?? ''));
  };
  const logger: Logger & { messages: string[] } = {
    ...silentLogger,
    [level]: record,
    messages,
    child: () => logger,
  };
  return logger;
}
