import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { silentLogger, systemClock, type Clock, type Logger } from '@rigging/core';
import { createQueue, type Queue } from '@rigging/async-queue';
import { sqlBackend } from '@rigging/async-queue/sql';
import { sqlLockProvider, type SqlLockProvider } from '@rigging/locks/sql';
import { PackageCache, type PackageRef } from '@rigging/package-cache';
import { httpFetcher } from '@rigging/package-cache/fetchers';
import type { ReshapeStore } from '@rigging/reshape';
import { sqlStore } from '@rigging/reshape/sql';
import { Engine } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';
import { openDatabase, type Database } from '@rigging/sql';
import type { ProviderNode, QueueKeyState } from '../wire.js';
import { MinicloudError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import { CacheView, type CacheCounters } from './cache-view.js';
import { NODE_1, type ComputeNodeSpec, type ReshapeOutcome } from './compute.js';
import {
  containerHandlers,
  type ContainerOpPayload,
  type ContainerOpResult,
  type ContainerOpType,
} from './containers.js';
import {
  EnvironmentFlows,
  type DeleteResult,
  type DeployOptions,
  type DeployResult,
  type FlowHandlers,
} from './environments.js';
import { CloudHub } from './events.js';
import { PackageRepository, type PackageFile } from './repository.js';
import type { TeardownHooks } from './teardown.js';
import { Closers, DEFAULT_CACHE_MAX_BYTES, invalid, MiniCloud, publishTree } from './mini-cloud.js';
import { every, watchQueues } from './watch.js';

export type { CacheCounters } from './cache-view.js';
export type {
  DeleteResult,
  DeployOptions,
  DeployPayload,
  DeployResult,
  FlowHandlers,
} from './environments.js';
export type { ContainerOpResult, ReshapeOutcome };

/** Options of {@link openCloud}. */
export interface CloudOptions {
  /** Database URL (`sqlite:…`, `postgres://…`, `mysql://…`); ignored when `database` is given. */
  databaseUrl?: string;
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

/** What {@link Cloud.prefetchPackage} did. */
export interface PrefetchResult {
  ref: PackageRef;
  hit: boolean;
  /** Outdated uploads of the same fqn/version removed by this download. */
  removed: PackageRef[];
  /** Outdated uploads kept because a deployment still uses them. */
  keptInUse: PackageRef[];
}

/** Container statuses as the queue reports them. */
export type ContainerStatus = Awaited<ReturnType<Queue<ContainerHandlers>['keyStatus']>>;
/** The handlers of the container-op queue (key = container name). */
export type ContainerHandlers = ReturnType<typeof containerHandlers>;

/**
 * The composition of every package into one control plane: database, reshape store, task
 * engine (SQL log, SQL locks), container-op queue (SQL jobboard), package cache (HTTP fetcher
 * from the cloud's own package repository) and an event hub in the dashboard's shape.
 */
export interface Cloud extends AsyncDisposable {
  readonly database: Database<MinicloudTables>;
  readonly dataDir: string;
  readonly logger: Logger;
  readonly reshape: ReshapeStore;
  readonly locks: SqlLockProvider;
  readonly engine: Engine;
  readonly queue: Queue<ContainerHandlers>;
  /**
   * The durable jobboard of deployments and teardowns (key `env:<name>`): whichever process
   * with `worker: true` claims an op runs it; if it dies, another takes it over and resumes the
   * flow from the task log.
   */
  readonly flows: Queue<FlowHandlers>;
  readonly packages: PackageCache;
  readonly repository: PackageRepository;
  /** Typed events in the dashboard's shape; `hub.state` is the folded dashboard state. */
  readonly hub: CloudHub;
  readonly node: ComputeNodeSpec;
  /** The cache counters (hits, misses, downloads, removals) seen by this process. */
  readonly cacheCounters: CacheCounters;

  /** The compute node's root provider uuid (undefined before it exists). */
  nodeUuid(): Promise<string | undefined>;
  /** The node's provider tree with usages (also published as `providers:tree`). */
  providerTree(): Promise<ProviderNode[]>;
  /**
   * Service startup: seeds the legacy node when missing (`seed`, default true), then runs the
   * resource-tracker flow with reshapes allowed. Publishes `providers:reshape` when reshaped.
   */
  startupReshape(options?: { seed?: boolean }): Promise<ReshapeOutcome>;
  /** The offline upgrade path: the same reshape without seeding (`minicloud reshape`). */
  offlineReshape(): Promise<ReshapeOutcome>;

  /** Uploads a package version to the repository (a new upload id each time). */
  uploadPackage(fqn: string, version: string, files: readonly PackageFile[]): Promise<PackageRef>;
  /** Downloads the current upload of a package into the cache (and releases it). */
  prefetchPackage(fqn: string, version: string): Promise<PrefetchResult>;

  /**
   * Deploys an environment: a `deploy` op on the flows queue, run by a worker (this process
   * when it is one) as a task flow under the environment's lock; see {@link DeployResult}.
   */
  deployEnvironment(env: string, options: DeployOptions): Promise<DeployResult>;
  /**
   * Tears an environment down with the destroy graph (a `delete` op on the flows queue) and
   * releases its package. `hooks` see the plan, notifications and object states.
   */
  deleteEnvironment(env: string, hooks?: TeardownHooks): Promise<DeleteResult>;
  /** Environments and their states. */
  environments(): Promise<{ name: string; state: string; package: string; flowId: string }[]>;

  /** Casts a container op to the queue (key = container name); resolves with the op id. */
  castContainerOp(
    container: string,
    type: ContainerOpType,
    payload?: ContainerOpPayload,
  ): Promise<string>;
  /** Containers of the simulated runtime. */
  containers(): Promise<{ name: string; image: string; state: string }[]>;

  /** A container queue key as the queue's store sees it (any process's work), dashboard-shaped. */
  queueKey(key: string): Promise<QueueKeyState>;
  /** Publishes the cache state (`cache:update`). */
  publishCache(): void;
  /** Stops the queue and the repository, releases packages, closes what the cloud opened. */
  close(): Promise<void>;
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
  const database = options.database ?? (await openDatabase<MinicloudTables>(options.databaseUrl!));
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
      backend: sqlBackend(database),
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
      closeGraceMs: 3000,
      logger: logger.child({ component: 'async-queue' }),
    });
    closers.add(() => queue.close());
    queue.onAny((event, payload) =>
      hub.queueEvent(event, payload as unknown as Record<string, unknown>),
    );

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
      closeGraceMs: 5000,
      logger: logger.child({ component: 'flows' }),
    });
    closers.add(() => flows.close());

    const watchMs = options.watchQueuesMs ?? (worker ? 0 : 1000);
    if (watchMs > 0) closers.add(watchQueues(queue, hub, { everyMs: watchMs, clock, logger }));
    // Packages of environments deleted by another process are released here within a second.
    closers.add(every(1000, 'reconcile', logger, () => environments.reconcile()));

    return new MiniCloud({
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
