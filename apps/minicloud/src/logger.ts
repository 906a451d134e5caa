import type { Logger } from '@rigging/core';
import pino from 'pino';

/**
 * The app's structured logger (pino, JSON lines on stderr). Quiet by default: set
 * `MINICLOUD_LOG_LEVEL` (`info`, `debug`, …) to see the packages' logs.
 */
export function createLogger(env: NodeJS.ProcessEnv = process.env): Logger {
  const level = env.MINICLOUD_LOG_LEVEL ?? 'silent';
  return pino({ level, base: { app: 'minicloud' } }, pino.destination(2)) as unknown as Logger;
}
