import { openDatabase } from '@rigging/sql';
import { openCloud } from '../cloud/index.js';
import { CommandError, UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import type { MinicloudTables } from '../migrations.js';
import { createServer } from '../http/server.js';
import type { Command } from './types.js';

export const DEFAULT_PORT = 8787;
export const DEFAULT_HOST = '127.0.0.1';

function parsePort(raw: string, source: string): number {
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65535) {
    throw new UsageError(`${source} must be a port number from 0 to 65535, got '${raw}'`);
  }
  return Number(raw);
}

/** Resolves when the process receives SIGTERM or SIGINT. */
function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', on);
      process.off('SIGINT', on);
      // A second signal while shutting down: give up waiting.
      const force = () => process.exit(130);
      process.once('SIGTERM', force);
      process.once('SIGINT', force);
      resolve(signal);
    };
    process.on('SIGTERM', on);
    process.on('SIGINT', on);
  });
}

export const serve: Command = {
  name: 'serve',
  summary: 'run the HTTP API, the Placement API and the dashboard (in-process workers)',
  usage: [
    'Usage: minicloud serve [--port <n>] [--host <h>] [--database <url>] [--data-dir <dir>]',
    '',
    `  --port <n>        port to listen on; 0 picks a free one (default: $MINICLOUD_PORT, else ${DEFAULT_PORT})`,
    `  --host <h>        address to listen on (default: $MINICLOUD_HOST, else ${DEFAULT_HOST})`,
    '  --database <url>  where minicloud keeps its state (default: $MINICLOUD_DATABASE_URL,',
    '                    else sqlite:.minicloud/minicloud.db)',
    '',
    'Runs the startup reshape, then serves the dashboard at /, the JSON API at /api and the',
    'Placement-compatible API at /placement until SIGTERM or SIGINT (then it stops accepting,',
    'ends event streams, lets running work finish or hands it back, and exits 0).',
  ],
  options: { port: { type: 'string' }, host: { type: 'string' } },
  async run({ config, out, values }) {
    const port =
      typeof values.port === 'string'
        ? parsePort(values.port, '--port')
        : process.env.MINICLOUD_PORT
          ? parsePort(process.env.MINICLOUD_PORT, 'MINICLOUD_PORT')
          : DEFAULT_PORT;
    const host =
      (typeof values.host === 'string' ? values.host : process.env.MINICLOUD_HOST) || DEFAULT_HOST;
    const logger = createLogger();
    // Listen for signals from the start, so a SIGTERM during startup still shuts down cleanly.
    const signalled = untilSignal();

    await using database = await openDatabase<MinicloudTables>(config.databaseUrl);
    await using cloud = await openCloud({ database, dataDir: config.dataDir, logger });
    await cloud.startupReshape();
    const server = await createServer({ cloud, config, logger });
    try {
      let url: string;
      try {
        url = await server.listen({ host, port });
      } catch (error) {
        const e = error as NodeJS.ErrnoException;
        const why =
          e.code === 'EADDRINUSE'
            ? 'the address is already in use'
            : e.code === 'EACCES'
              ? 'permission denied'
              : e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND'
                ? 'no such local address'
                : e.message;
        throw new CommandError(
          'minicloud.listen_failed',
          `cannot listen on ${host}:${port}: ${why}`,
        );
      }
      out.line(`minicloud serve listening on ${url} (dashboard /, API /api, Placement /placement)`);
      const signal = await signalled;
      logger.info({ signal }, 'minicloud serve: shutting down');
    } finally {
      await server.close();
    }
    // Whatever a closed driver or library leaves scheduled must not keep the process up.
    setTimeout(() => process.exit(), 2_000).unref();
  },
};
