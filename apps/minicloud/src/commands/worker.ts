import { redactUrl } from '@rigging/sql';
import { openCloud } from '../cloud/index.js';
import { UsageError } from '../errors.js';
import { createLogger } from '../logger.js';
import { openTracing } from '../tracing.js';
import { intOption } from './options.js';
import type { Command } from './types.js';

export const worker: Command = {
  name: 'worker',
  summary: 'join the jobboard: run deployments, teardowns and container ops until stopped',
  usage: [
    'Usage: minicloud worker [--database <url>] [--data-dir <dir>] [--concurrency <n>] [--lease-ms <ms>]',
    '',
    '  Runs flows (deploy/delete environment) and container operations claimed from the',
    "  database's durable queues, beside any number of other workers and `minicloud serve`",
    '  processes (PostgreSQL or MariaDB across hosts; one SQLite file on one host).',
    '  If a worker dies, the others take its work over once its lease expires and resume its',
    '  flows from the task log. SIGTERM/SIGINT: stop claiming, finish or hand back work, exit 0.',
    '  With $OTEL_EXPORTER_OTLP_ENDPOINT set, its flows are exported as OpenTelemetry traces.',
    '',
    '  --concurrency <n>  container ops of different containers at once (default 3)',
    '  --lease-ms <ms>    how soon others take over if this worker dies (default 10000)',
  ],
  options: { concurrency: { type: 'string' }, 'lease-ms': { type: 'string' } },
  async run({ config, out, values }) {
    const concurrency = intOption(values, 'concurrency', 1, 64);
    const leaseMs = intOption(values, 'lease-ms', 500, 600_000);
    if (config.databaseUrl === 'sqlite::memory:' || config.databaseUrl === 'sqlite://:memory:') {
      throw new UsageError(
        'a worker needs a database other processes can reach, not sqlite::memory:',
      );
    }
    const logger = createLogger();
    const tracing = await openTracing(logger);
    const cloud = await openCloud({
      databaseUrl: config.databaseUrl,
      databaseOptions: config.databaseOptions,
      dataDir: config.dataDir,
      logger,
      worker: true,
      ...(concurrency ? { queueConcurrency: concurrency } : {}),
      ...(leaseMs ? { leaseMs } : {}),
    });
    await tracing?.trace(cloud.engine);
    out.line(
      `minicloud worker ready: pid ${process.pid}, database ${redactUrl(config.databaseUrl)}`,
    );
    await new Promise<void>((stop) => {
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
    out.line(`minicloud worker ${process.pid}: stopping (finishing or handing back work)`);
    await cloud.close();
    await tracing?.close();
    out.line(`minicloud worker ${process.pid}: stopped`);
  },
};
