import { openDatabase } from '@rigging/sql';
import { isIP } from 'node:net';
import { FailureLimiter } from '../auth/limiter.js';
import { ADMIN_TOKEN_ENV, TokenStore } from '../auth/tokens.js';
import { openCloud } from '../cloud/index.js';
import { intEnv } from '../config.js';
import { Auth, type AuthMode } from '../http/auth.js';
import { createMetrics } from '../http/metrics.js';
import { CommandError, UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import type { MinicloudTables } from '../migrations.js';
import { createServer } from '../http/server.js';
import { openTracing } from '../tracing.js';
import type { Command } from './types.js';

export const DEFAULT_PORT = 8787;
export const DEFAULT_HOST = '127.0.0.1';

function parsePort(raw: string, source: string): number {
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65535) {
    throw new UsageError(`${source} must be a port number from 0 to 65535, got '${raw}'`);
  }
  return Number(raw);
}

/** A comma-separated flag (else environment variable) as a list, each entry checked. */
function list(flag: unknown, env: string, name: string): string[] {
  const raw = typeof flag === 'string' ? flag : (process.env[env] ?? '');
  const items = raw
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  for (const item of items) {
    if (item.length > 253 || /[\s/]/.test(item.replace(/^https?:\/\//, ''))) {
      throw new UsageError(`${name}: not a host name or origin: '${item}'`);
    }
  }
  return items;
}

/** Whether `host` only accepts connections from this machine. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h === '::1') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  return h.startsWith('::ffff:127.');
}

/**
 * How `serve` on `host` checks tokens: on loopback once one is configured; elsewhere always,
 * and only when one is configured unless `insecure` (`--insecure-no-auth`).
 */
async function authMode(
  host: string,
  tokens: TokenStore,
  insecure: boolean,
  warn: (line: string) => void,
): Promise<AuthMode> {
  if (isLoopback(host)) return 'auto';
  if (await tokens.configured()) return 'required';
  if (!insecure) {
    throw new CommandError(
      'minicloud.auth_required',
      `refusing to listen on ${host} without authentication: create a token ` +
        `(minicloud token create --role admin) or set ${ADMIN_TOKEN_ENV}, ` +
        'or pass --insecure-no-auth to serve anyone who can reach it',
    );
  }
  warn(
    `minicloud serve: WARNING: --insecure-no-auth: anyone who can reach ${host} controls this cloud`,
  );
  return 'auto';
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
    'Usage: minicloud serve [--port <n>] [--host <h>] [--insecure-no-auth] [--no-workers]',
    '                       [--allowed-host <h,…>] [--allowed-origin <o,…>] [--secure-cookies]',
    '                       [--database <url>] [--data-dir <dir>]',
    '',
    `  --port <n>        port to listen on; 0 picks a free one (default: $MINICLOUD_PORT, else ${DEFAULT_PORT})`,
    `  --host <h>        address to listen on (default: $MINICLOUD_HOST, else ${DEFAULT_HOST})`,
    '  --insecure-no-auth  listen on a non-loopback address with no token configured',
    '  --allowed-host <h,…>  Host names answered besides the bound address, localhost,',
    '                    127.0.0.1 and [::1] (default: $MINICLOUD_ALLOWED_HOSTS); others get 421',
    '  --allowed-origin <o,…>  origins (https://ops.example.com) whose pages may send',
    '                    non-GET requests besides this server itself ($MINICLOUD_ALLOWED_ORIGINS)',
    '  --secure-cookies  always mark the dashboard session cookie Secure (served over TLS by a',
    '                    proxy; it is Secure anyway when the proxy sends X-Forwarded-Proto: https)',
    '  --no-workers      run no container-op or flow workers in this process: the API only,',
    '                    for `minicloud worker` processes (on any host) to do the work',
    '  --database <url>  where minicloud keeps its state (default: $MINICLOUD_DATABASE_URL,',
    '                    else sqlite:.minicloud/minicloud.db)',
    '',
    'Runs the startup reshape, then serves the dashboard at /, the JSON API at /api and the',
    'Placement-compatible API at /placement until SIGTERM or SIGINT (then it stops accepting,',
    'ends event streams, lets running work finish or hands it back, and exits 0).',
    '',
    'Authentication: once a token exists (minicloud token create) or $MINICLOUD_ADMIN_TOKEN is',
    'set, every API call needs one (Authorization: Bearer, X-Auth-Token for /placement). On a',
    'non-loopback address serve refuses to start without one, unless --insecure-no-auth.',
    'Once a token was created, tokens stay required after the last one is revoked',
    '(minicloud token disable-auth goes back to no tokens on loopback). Past',
    '$MINICLOUD_AUTH_MAX_FAILURES (default 20) wrong credentials in a minute from one address or',
    'with one token prefix, wrong credentials answer 429 until the minute ends; valid ones always',
    'pass. At most $MINICLOUD_MAX_EVENT_STREAMS (default 100) dashboard event streams are served',
    'at once, 25 of them per caller.',
    '',
    'Every request must name this server in Host (DNS rebinding), and every non-GET request',
    'sent by a browser must come from this server’s own pages (Origin, Sec-Fetch-Site).',
    '',
    'Tracing: with $OTEL_EXPORTER_OTLP_ENDPOINT set, the task flows this process runs are',
    'exported as OpenTelemetry traces over OTLP/HTTP (${endpoint}/v1/traces).',
  ],
  options: {
    port: { type: 'string' },
    host: { type: 'string' },
    'insecure-no-auth': { type: 'boolean' },
    'no-workers': { type: 'boolean' },
    'allowed-host': { type: 'string' },
    'allowed-origin': { type: 'string' },
    'secure-cookies': { type: 'boolean' },
  },
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

    // Closed after the cloud, so that the spans of flows ending as it closes are exported too.
    await using tracing = await openTracing(logger);
    await using database = await openDatabase<MinicloudTables>(
      config.databaseUrl,
      config.databaseOptions,
    );
    await using cloud = await openCloud({
      database,
      dataDir: config.dataDir,
      logger,
      ...(values['no-workers'] === true ? { worker: false } : {}),
    });
    await tracing?.trace(cloud.engine);
    const tokens = new TokenStore(database, {
      adminToken: process.env[ADMIN_TOKEN_ENV] || undefined,
    });
    const mode = await authMode(host, tokens, values['insecure-no-auth'] === true, (line) =>
      process.stderr.write(`${line}\n`),
    );
    const maxFailures = process.env.MINICLOUD_AUTH_MAX_FAILURES
      ? intEnv('MINICLOUD_AUTH_MAX_FAILURES', 1, 1_000_000)
      : undefined;
    const metrics = createMetrics(cloud);
    const reshaped = await cloud.startupReshape();
    metrics.observeReshape(reshaped.durationMs, reshaped.movedConsumers.length);
    const server = await createServer({
      cloud,
      config,
      logger,
      auth: new Auth({
        tokens,
        mode,
        limiter: new FailureLimiter({ maxFailures }),
        secureCookies: values['secure-cookies'] === true,
      }),
      allowedHosts: list(values['allowed-host'], 'MINICLOUD_ALLOWED_HOSTS', '--allowed-host'),
      allowedOrigins: list(
        values['allowed-origin'],
        'MINICLOUD_ALLOWED_ORIGINS',
        '--allowed-origin',
      ),
      metrics,
      ...(process.env.MINICLOUD_MAX_EVENT_STREAMS
        ? { maxEventStreams: intEnv('MINICLOUD_MAX_EVENT_STREAMS', 1, 100_000) }
        : {}),
    });
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
      metrics.close();
    }
    // Whatever a closed driver or library leaves scheduled must not keep the process up.
    setTimeout(() => process.exit(), 2_000).unref();
  },
};
