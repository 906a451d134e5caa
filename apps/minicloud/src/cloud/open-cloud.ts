import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { silentLogger, systemClock, type Clock, type Logger } from '@rigging/core';
import { createQueue } from '@rigging/async-queue';
import { sqlBackend } from '@rigging/async-queue/sql';
import { sqlLockProvider } from '@rigging/locks/sql';
import { PackageCache } from '@rigging/package-cache';
import { httpFetcher } from '@rigging/package-cache/fetchers';
import { sqlStore } from '@rigging/reshape/sql';
import { Engine } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';
import { openDatabase, type Database, type OpenDatabaseOptions } from '@rigging/sql';
import { MinicloudError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import { CacheView } from './cache-view.js';
import { NODE_1, type ComputeNodeSpec, type ReshapeOutcome } from './compute.js';
import { containerHandlers, type ContainerOpResult } from './containers.js';
import { EnvironmentFlows } from './environments.js';
import { CloudHub } from './events.js';
import { PackageRepository } from './repository.js';
import { Closers } from './closers.js';
import { Cloud, invalid, publishTree } from './cloud.js';
import { every, watchQueues } from './watch.js';

/** The queue events the hub follows a container key from. */
const QUEUE_EVENTS = [
  'op:queued',
  'op:started',
  'op:succeeded',
  'op:released',
  'op:failed',
  'op:cancelled',
  'key:blocked',
  'key:resumed',
  'key:discarded',
] as const;

export type { CacheCounters } from './cache-view.js';
export type {
  DeleteResult,
  DeployOptions,
  DeployPayload,
  DeployResult,
  FlowHandlers,
} from './environments.js';

export type { ContainerOpResult, ReshapeOutcome };
export type { ContainerHandlers, ContainerStatus, PrefetchResult } from './types.js';

/** The package cache's byte cap unless `cacheMaxBytes` says otherwise. */
const DEFAULT_CACHE_MAX_BYTES = 256 * 1024 * 1024;

/** How often a process that does not run ops looks for the end of the ops it waits for. */
const WAIT_POLL_MS = 100;

/** How many times an op may lose its worker (lease expired) before it is failed as poison. */
const MAX_LOST_WORKERS = 6;

/** Options of {@link openCloud}. */
export interface CloudOptions {
  /** Database URL (`sqlite:…`, `postgres://…`, `mysql://…`); ignored when `database` is given. */
  databaseUrl?: string;
  /** What `databaseUrl` is opened with (`@rigging/sql`'s `openDatabase` options). */
  databaseOptions?: OpenDatabaseOptions;
  /** An already open database (the cloud migrates it but does not close it). */
  database?: Database<MinicloudTables>;
  /** Directory for files: `<dataDir>/packages` (cache), `<dataDir>/repository` (archives). */
  dataDir: string;
  /** pino-compatible. @default silentLogger */
  logger?: Logger;
  /**
   * The time of minicloud's own records and events (resource, container, journal and package
   * rows, dashboard times, plan ids), of its simulated step durations, and of the task engine
   * (log records, retry delays). The queues, locks and package cache keep the system clock:
   * their leases are compared across processes. @default systemClock
   */
  clock?: Clock;
  /** Run queue workers in this process (false: producer only). @default true */
  worker?: boolean;
  /** Container ops of different containers run at once. @default 3 */
  queueConcurrency?: number;
  /** Deployments/teardowns of different environments run at once in this process. @default 2 */
  flowConcurrency?: number;
  /**
   * How soon other processes take over the work of one that died: the queues' claim lease and
   * the SQLite lock lease (PostgreSQL/MariaDB locks end with the session at once). @default 10000
   */
  leaseMs?: number;
  /**
   * Poll the container queue every this many ms and publish keys whose state changed through
   * other processes' work (their events do not reach this process), so a dashboard shows work
   * done by `minicloud worker` processes too. `0`: only this process's events.
   * @default 0 (1000 when `worker` is false)
   */
  watchQueuesMs?: number;
  /** Serve the package repository on loopback (random port) at once. @default true */
  serveRepository?: boolean | { host?: string; port?: number };
  /**
   * Where the package cache downloads from: a URL template with `{fqn}`, `{version}`, `{id}`.
   * @default this cloud's own repository (`<repository url>/packages/{fqn}/{version}/{id}`)
   */
  packageUrl?: string;
  /** Package cache byte cap. @default 256 MiB */
  cacheMaxBytes?: number;
  /** The simulated compute node. @default node-1 with 4 GPUs × 4 VGPUs */
  node?: ComputeNodeSpec;
}

/** Opens the repository (served unless told not to) and the package cache fetching from it. */
async function openPackages(
  options: CloudOptions,
  database: Database<MinicloudTables>,
  dataDir: string,
  logger: Logger,
  clock: Clock,
  closers: Closers,
): Promise<{ repository: PackageRepository; packages: PackageCache }> {
  const repository = new PackageRepository(database, join(dataDir, 'repository'), clock);
  closers.add(() => repository.close());
  if (options.serveRepository !== false) {
    await repository.listen(
      typeof options.serveRepository === 'object' ? options.serveRepository : {},
    );
  }
  const noRepository = (): never => {
    throw new MinicloudError(
      'minicloud.no_repository',
      'the package repository is not being served',
    );
  };
  const packages = await PackageCache.open({
    root: join(dataDir, 'packages'),
    maxBytes: options.cacheMaxBytes ?? DEFAULT_CACHE_MAX_BYTES,
    logger: logger.child({ component: 'package-cache' }),
    durable: false,
    fetch: httpFetcher({
      url: options.packageUrl ?? repository.urlTemplate ?? noRepository,
      // this process's repository wants its secret; another one gets nothing of it
      ...(options.packageUrl === undefined
        ? { headers: () => ({ ...repository.fetchHeaders }) }
        : {}),
      retries: 2,
      retryDelayMs: 100,
      timeoutMs: 10_000,
    }),
  });
  closers.add(() => packages.close());
  return { repository, packages };
}

/** Opens (and migrates) everything a minicloud process needs. Close it with `await using`. */
export async function openCloud(options: CloudOptions): Promise<Cloud> {
  if (!options.database && !options.databaseUrl)
    throw invalid('openCloud: databaseUrl or database is required');
  if (!options.dataDir) throw invalid('openCloud: dataDir is required');
  const leaseMs = options.leaseMs ?? 10_000;
  if (!Number.isInteger(leaseMs) || leaseMs < 500)
    throw invalid(`leaseMs must be an integer >= 500, got ${String(options.leaseMs)}`);
  const logger = options.logger ?? silentLogger;
  const clock = options.clock ?? systemClock;
  const dataDir = resolve(options.dataDir);
  const closers = new Closers(logger);
  const database =
    options.database ??
    (await openDatabase<MinicloudTables>(options.databaseUrl!, options.databaseOptions));
  if (!options.database) closers.add(() => database.close());
  try {
    await database.migrate(NAMESPACE, migrations);
    await mkdir(join(dataDir, 'packages'), { recursive: true });
    const hub = new CloudHub(clock);
    const node = options.node ?? NODE_1;
    const reshape = await sqlStore(database);
    const locks = sqlLockProvider(database, { name: 'minicloud', ttlMs: leaseMs });
    closers.add(() => locks.close());
    const engine = new Engine({
      log: await sqlLog(database),
      locks,
      clock,
      logger: logger.child({ component: 'tasks' }),
    });
    engine.on('task:state', (e) => hub.taskState(e));
    engine.on('flow:state', (e) => hub.flowState(e));

    const { repository, packages } = await openPackages(
      options,
      database,
      dataDir,
      logger,
      clock,
      closers,
    );
    const cache = new CacheView({
      packages,
      repository,
      database,
      hub,
      clock,
      capBytes: options.cacheMaxBytes ?? DEFAULT_CACHE_MAX_BYTES,
    });

    const worker = options.worker ?? true;
    const queue = createQueue({
      // A process that only submits (`minicloud serve` beside workers) learns of ops' ends by
      // polling the ops it waits for (long polls of `GET /api/ops/:id`) every 100 ms, all in one
      // read: announcing every end instead would make each completion NOTIFY, and PostgreSQL
      // serializes notifying commits.
      backend: sqlBackend(database, worker ? {} : { pollMs: WAIT_POLL_MS }),
      handlers: containerHandlers({
        database,
        engine,
        clock,
        onFlow: (id, name, tasks) => hub.flowStarted(id, name, tasks),
      }),
      concurrency: options.queueConcurrency ?? 3,
      policy: 'stop',
      worker,
      leaseMs,
      // A lost worker is the host's fault, not the op's: a container op applies its effect once
      // whoever runs it (fencing and the runtime's witness), so it is failed as poison only after
      // it lost its worker this many times, not after three (a partition, a crash and a pause
      // of the hosts that held it in turn reach three).
      maxLeaseExpiries: MAX_LOST_WORKERS,
      closeGraceMs: 3000,
      logger: logger.child({ component: 'async-queue' }),
    });
    closers.add(() => queue.close());
    // Named events, not `onAny`: a `key:status` listener makes the queue read the key's status
    // from its store after every enqueue and completion (a commit each); the hub follows the
    // status from these events instead, and whoever listens to `key:status` gets it as read.
    for (const event of QUEUE_EVENTS) {
      queue.on(event, (payload) =>
        hub.queueEvent(event, payload as unknown as Record<string, unknown>),
      );
    }

    const environments = new EnvironmentFlows({
      database,
      reshape,
      engine,
      locks,
      hub,
      cache,
      node,
      clock,
      leaseMs,
      providerTree: () => publishTree(reshape, node, hub),
    });
    closers.add(() => environments.releaseAll());
    const flows = createQueue({
      backend: sqlBackend(database, { name: 'minicloud-flows' }),
      handlers: environments.handlers,
      concurrency: options.flowConcurrency ?? 2,
      policy: 'continue',
      worker,
      leaseMs,
      maxLeaseExpiries: MAX_LOST_WORKERS,
      closeGraceMs: 5000,
      // Once aborted, a flow stops at its next task boundary: the task running then finishes,
      // the flow is logged SUSPENDED and its op given back. The op is given back regardless only
      // if that takes longer than this (another worker then re-runs that task).
      closeAbortWaitMs: 10_000,
      logger: logger.child({ component: 'flows' }),
    });
    closers.add(() => flows.close());

    const watchMs = options.watchQueuesMs ?? (worker ? 0 : 1000);
    if (watchMs > 0) closers.add(watchQueues(queue, hub, { everyMs: watchMs, clock, logger }));
    // Packages of environments deleted by another process are released here within a second.
    closers.add(every(1000, 'reconcile', logger, () => environments.reconcile()));

    return new Cloud({
      database,
      dataDir,
      logger,
      clock,
      reshape,
      locks,
      engine,
      queue,
      flows,
      packages,
      repository,
      hub,
      node,
      cache,
      environments,
      closers,
    });
  } catch (error) {
    await closers.closeAll();
    throw error;
  }
}
