import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { RiggingError, silentLogger, sleep, type Logger } from '@rigging/core';
import { createQueue, type HandlerContext, type Queue } from '@rigging/async-queue';
import { sqlBackend } from '@rigging/async-queue/sql';
import { sqlLockProvider, type SqlLockProvider } from '@rigging/locks/sql';
import { PackageCache, type CachedPackage } from '@rigging/package-cache';
import { httpFetcher } from '@rigging/package-cache/fetchers';
import type { ReshapeStore } from '@rigging/reshape';
import { sqlStore } from '@rigging/reshape/sql';
import { Engine, FlowFailed, type LogEntry } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';
import { openDatabase, type Database } from '@rigging/sql';
import type {
  CacheEntry,
  CacheLockHolder,
  ProviderNode,
  QueueKeyState,
  ReshapeRecord,
} from '../../dashboard/src/state.js';
import { CommandError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import {
  findNode,
  NODE_1,
  reshapeNode,
  treeSnapshot,
  type ComputeNodeSpec,
  type ReshapeOutcome,
} from './compute.js';
import {
  CONTAINER_OPS,
  containerHandlers,
  type ContainerOpPayload,
  type ContainerOpResult,
  type ContainerOpType,
} from './containers.js';
import {
  deployFlow,
  deployTaskNames,
  DEPLOY_FLOW,
  type DeployFaults,
  type DeployInputs,
} from './deploy.js';
import { CloudHub } from './events.js';
import { outcomeOf, unwrapOpError, type TaskUpdate } from './flows.js';
import { PackageRepository, type PackageFile, type PackageRef } from './repository.js';
import { teardownEnvironment, type TeardownHooks, type TeardownReport } from './teardown.js';

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

/** Options of {@link Cloud.deployEnvironment}. */
export interface DeployOptions {
  /** The application package (its current upload in the repository is used). */
  package: { fqn: string; version: string };
  faults?: DeployFaults;
  /** How long to wait for the environment's lock. @default 30000 */
  lockTimeoutMs?: number;
  signal?: AbortSignal;
  /** Called once the package is in the cache, before the flow runs. */
  onPackage?(pkg: PackageRef & { hit: boolean; path: string }): void;
  /** Each task transition, read live from the durable task log (whichever process runs it). */
  onTask?(update: TaskUpdate): void;
}

/** What {@link Cloud.deployEnvironment} did (a failed flow is a result, not an exception). */
export interface DeployResult {
  env: string;
  flowId: string;
  ok: boolean;
  package: PackageRef & { hit: boolean; path: string };
  /** Task names with more than one attempt, e.g. `{ 'vm-2': 2 }`. */
  retried: Record<string, number>;
  /** When `ok` is false: the failed task and message. */
  failure: { task: string | null; message: string } | null;
  /** When `ok` is false: tasks reverted, in the order they were reverted. */
  reverted: string[];
  /** VM → GPU provider it got a VGPU on. */
  vms: Record<string, string>;
  durationMs: number;
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
export type ContainerHandlers = ReturnType<typeof containerHandlers>;

/** What a `deploy` op carries (the producer picks the flow id, so a takeover resumes it). */
export interface DeployPayload {
  env: string;
  flowId: string;
  package: { fqn: string; version: string };
  faults: DeployInputs['faults'];
  lockTimeoutMs: number;
}

/** What {@link Cloud.deleteEnvironment} did. */
export type DeleteResult = TeardownReport & {
  /** The package the environment was deployed from. */
  package: PackageRef;
  /** That package, when this teardown removed its outdated copy from the cache. */
  packageRemoved: PackageRef | null;
  /** Object states in the order they happened (replayed to the caller's hooks). */
  objects: [string, 'destroying' | 'destroyed' | 'failed'][];
  /** `[subscriber, publisher]` notifications in the order they ran (replayed likewise). */
  notifications: [string, string][];
};

/** The handlers of the flows queue: deployments and teardowns, keyed `env:<name>`. */
export interface FlowHandlers {
  [type: string]: (payload: any, ctx: HandlerContext) => Promise<unknown>;
  deploy(payload: DeployPayload, ctx: HandlerContext): Promise<DeployResult>;
  delete(payload: { env: string }, ctx: HandlerContext): Promise<DeleteResult>;
}

/** Counters of the package cache as the app sees them. */
export interface CacheCounters {
  hits: number;
  misses: number;
  downloads: number;
  removed: { ref: PackageRef; reason: string }[];
}

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

const ENV_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const CONTAINER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function invalid(message: string): CommandError {
  return new CommandError('minicloud.invalid_input', message);
}

/** Opens (and migrates) everything a minicloud process needs. Close it with `await using`. */
export async function openCloud(options: CloudOptions): Promise<Cloud> {
  if (!options.database && !options.databaseUrl)
    throw invalid('openCloud: databaseUrl or database is required');
  if (!options.dataDir) throw invalid('openCloud: dataDir is required');
  const logger = options.logger ?? silentLogger;
  const dataDir = resolve(options.dataDir);
  const ownsDatabase = !options.database;
  const database = options.database ?? (await openDatabase<MinicloudTables>(options.databaseUrl!));
  const closers: (() => Promise<void>)[] = [];
  if (ownsDatabase) closers.push(() => database.close());
  try {
    await database.migrate(NAMESPACE, migrations);
    await mkdir(join(dataDir, 'packages'), { recursive: true });
    const hub = new CloudHub();
    const node = options.node ?? NODE_1;

    const reshape = await sqlStore(database);
    const leaseMs = options.leaseMs ?? 10_000;
    if (!Number.isInteger(leaseMs) || leaseMs < 500)
      throw invalid(`leaseMs must be an integer >= 500, got ${String(options.leaseMs)}`);
    const locks = sqlLockProvider(database, { name: 'minicloud', ttlMs: leaseMs });
    closers.push(() => locks.close());

    const engine = new Engine({
      log: await sqlLog(database),
      locks,
      logger: logger.child({ component: 'tasks' }),
    });
    engine.on('task:state', (e) => hub.taskState(e));
    engine.on('flow:state', (e) => hub.flowState(e));

    const repository = new PackageRepository(database, join(dataDir, 'repository'));
    closers.push(() => repository.close());
    if (options.serveRepository !== false) {
      await repository.listen(
        typeof options.serveRepository === 'object' ? options.serveRepository : {},
      );
    }
    const packageUrl = options.packageUrl;
    const packages = await PackageCache.open({
      root: join(dataDir, 'packages'),
      maxBytes: options.cacheMaxBytes ?? 256 * 1024 * 1024,
      logger: logger.child({ component: 'package-cache' }),
      durable: false,
      fetch: httpFetcher({
        url: (ref) => {
          const template = packageUrl ?? repository.urlTemplate;
          if (!template)
            throw new CommandError(
              'minicloud.no_repository',
              'the package repository is not being served',
            );
          return template
            .replace(/\{fqn\}/g, encodeURIComponent(ref.fqn))
            .replace(/\{version\}/g, encodeURIComponent(ref.version))
            .replace(/\{id\}/g, encodeURIComponent(ref.id));
        },
        retries: 2,
        retryDelayMs: 100,
        timeoutMs: 10_000,
      }),
    });
    closers.push(() => packages.close());

    const counters: CacheCounters = { hits: 0, misses: 0, downloads: 0, removed: [] };
    const entries = new Map<string, CacheEntry>();
    const inUse = new Map<string, number>();
    const refKey = (r: PackageRef) => `${r.fqn}/${r.version}/${r.id}`;
    // The cache's locks as this process knows them: its usage leases (shared), its downloads
    // (exclusive) and the holders it waits for in other processes.
    const holders = new Map<string, CacheLockHolder>();
    const hold = (key: string, holder: CacheLockHolder | undefined) => {
      if (holder) holders.set(key, holder);
      else holders.delete(key);
    };
    packages.on('wait', (w) => {
      hold(
        `wait:${w.key}`,
        w.done
          ? undefined
          : {
              key: w.key,
              pid: w.pid ?? null,
              mode: w.lock === 'download' ? 'exclusive' : 'shared',
              since: Date.now() - w.waitedMs,
              owner: `another process (waited for ${w.waitedMs} ms)`,
            },
      );
      publishCache();
    });
    const publishCache = () => {
      const s = packages.stats();
      hub.publish({
        type: 'cache:update',
        cache: {
          capBytes: options.cacheMaxBytes ?? 256 * 1024 * 1024,
          bytesUsed: s.bytes,
          hits: counters.hits,
          misses: counters.misses,
          entries: [...entries.values()].map((e) => ({ ...e, inUse: inUse.get(refKey(e)) ?? 0 })),
          locks: [...holders.values()],
        },
      });
    };
    packages.on('hit', (e) => {
      const k = refKey(e.ref);
      const prev = entries.get(k);
      entries.set(k, { ...e.ref, bytes: prev?.bytes ?? 0, inUse: 0, lastUsedAt: Date.now() });
    });
    packages.on('download', (e) => {
      counters.downloads++;
      hold(`download:${refKey(e.ref)}`, undefined);
      entries.set(refKey(e.ref), { ...e.ref, bytes: e.size, inUse: 0, lastUsedAt: Date.now() });
      hub.publish({ type: 'cache:download-done', id: refKey(e.ref) });
    });
    packages.on('progress', (p) => {
      const key = `download:${refKey(p.ref)}`;
      if (p.pid === process.pid && !holders.has(key)) {
        hold(key, {
          key,
          pid: process.pid,
          mode: 'exclusive',
          since: Date.now(),
          owner: 'download',
        });
        publishCache();
      }
      hub.publish({
        type: 'cache:download',
        download: {
          id: refKey(p.ref),
          fqn: p.ref.fqn,
          version: p.ref.version,
          bytesDone: p.received,
          bytesTotal: p.total ?? null,
        },
      });
    });
    packages.on('remove', (e) => {
      counters.removed.push({ ref: e.ref, reason: e.reason });
      entries.delete(refKey(e.ref));
      publishCache();
    });

    const handlers = containerHandlers(database, engine, (id, name, tasks) =>
      hub.flowStarted(id, name, tasks),
    );
    const queue = createQueue({
      backend: sqlBackend(database),
      handlers,
      concurrency: options.queueConcurrency ?? 3,
      policy: 'stop',
      worker: options.worker ?? true,
      leaseMs,
      closeGraceMs: 3000,
      logger: logger.child({ component: 'async-queue' }),
    });
    closers.push(() => queue.close());
    queue.onAny((event, payload) =>
      hub.queueEvent(event, payload as unknown as Record<string, unknown>),
    );

    const nodeUuid = () => findNode(reshape, node.name);
    const envLeases = new Map<string, CachedPackage>();
    closers.push(async () => {
      for (const p of envLeases.values()) await p.release();
      envLeases.clear();
    });
    const flow = deployFlow({
      database,
      reshape,
      nodeUuid: async () => {
        const uuid = await nodeUuid();
        if (!uuid)
          throw new CommandError(
            'minicloud.no_compute_node',
            `compute node ${node.name} does not exist; run the startup reshape first`,
          );
        return uuid;
      },
    });

    const providerTree = async (): Promise<ProviderNode[]> => {
      const uuid = await nodeUuid();
      const nodes = uuid ? await treeSnapshot(reshape, uuid) : [];
      hub.publish({ type: 'providers:tree', nodes });
      return nodes;
    };

    const runReshape = async (seed: boolean, offline: boolean): Promise<ReshapeOutcome> => {
      const outcome = await reshapeNode(reshape, node, {
        seed,
        offline,
        logger: logger.child({ component: 'reshape' }),
      });
      if (outcome.reshaped) {
        const record: ReshapeRecord = {
          at: Date.now(),
          node: node.name,
          reason: outcome.needed ?? 'reshape',
          before: outcome.before,
          after: outcome.after,
          allocationsMoved: outcome.movedConsumers.length,
        };
        hub.publish({ type: 'providers:reshape', reshape: record });
      } else {
        hub.publish({ type: 'providers:tree', nodes: outcome.after });
      }
      return outcome;
    };

    const acquireRef = async (ref: PackageRef, signal?: AbortSignal) => {
      const pkg = await packages.acquire(ref, signal ? { signal } : {});
      const n = (inUse.get(refKey(ref)) ?? 0) + 1;
      inUse.set(refKey(ref), n);
      const key = `usage:${refKey(ref)}`;
      hold(key, {
        key,
        pid: process.pid,
        mode: 'shared',
        since: holders.get(key)?.since ?? Date.now(),
        owner: `${n} lease(s) in this process`,
      });
      publishCache();
      return pkg;
    };
    const acquirePackage = async (fqn: string, version: string, signal?: AbortSignal) => {
      const current = await repository.current(fqn, version);
      if (!current) {
        throw new CommandError(
          'minicloud.package_not_found',
          `package ${fqn} ${version} is not in the repository; upload it first`,
        );
      }
      return acquireRef({ fqn, version, id: current.id }, signal);
    };
    const releasePackage = async (pkg: CachedPackage) => {
      await pkg.release();
      const k = refKey(pkg.ref);
      const n = Math.max(0, (inUse.get(k) ?? 1) - 1);
      inUse.set(k, n);
      const held = holders.get(`usage:${k}`);
      if (n === 0) hold(`usage:${k}`, undefined);
      else if (held) held.owner = `${n} lease(s) in this process`;
      publishCache();
    };

    const checkEnv = (env: unknown): string => {
      if (typeof env !== 'string' || !ENV_NAME.test(env)) {
        throw invalid(
          `environment name must be 1-63 lowercase letters, digits or '-', got ${JSON.stringify(env)}`,
        );
      }
      return env;
    };
    const envRow = (env: string) =>
      database.db
        .selectFrom('minicloud_environments')
        .selectAll()
        .where('name', '=', env)
        .executeTakeFirst();
    const parseRef = (text: string): PackageRef => {
      const [fqn = '', version = '', id = ''] = text.split('/');
      return { fqn, version, id };
    };

    /** Removes `ref` from the cache when it is outdated and no environment uses it any more. */
    const cleanOutdated = async (ref: PackageRef): Promise<boolean> => {
      const current = await repository.current(ref.fqn, ref.version);
      if (current?.id === ref.id) return false;
      const users = await database.db
        .selectFrom('minicloud_environments')
        .select('name')
        .where('package', '=', refKey(ref))
        .execute();
      if (users.length > 0) return false;
      return packages.remove(ref);
    };

    /**
     * Runs (or, after a takeover, resumes) a flow; waits out a dead owner's lock lease. The
     * queue's `signal` is not the flow's: aborting it (this worker closes, or lost its claim)
     * suspends the flow at the next task boundary for another worker, it does not revert it.
     */
    const runOrResume = async (flowId: string, inputs: DeployInputs, signal: AbortSignal) => {
      for (;;) {
        try {
          if (await engine.log.load(flowId)) return await engine.resume(flowId, flow);
          return await engine.run(flow, { inputs, flowId });
        } catch (error) {
          // A process that died still holds the flow's lock until its lease expires.
          if (!RiggingError.hasCode(error, 'tasks.flow_busy') || signal.aborted) throw error;
          await sleep(Math.min(500, leaseMs / 4), { signal });
        }
      }
    };

    /** The `deploy` op: on whichever worker claims it (first run or takeover). */
    const deployHandler = async (p: DeployPayload, ctx: HandlerContext): Promise<DeployResult> => {
      const started = Date.now();
      await using _lock = await locks.acquire(`minicloud:env:${p.env}`, {
        timeoutMs: p.lockTimeoutMs,
        signal: ctx.signal,
      });
      const existing = await envRow(p.env);
      if (existing && existing.flow_id !== p.flowId) {
        throw new CommandError(
          'minicloud.env_exists',
          `environment ${p.env} already exists (${existing.state}); delete it first`,
        );
      }
      // A takeover keeps the package the first owner deployed with (even if re-uploaded since).
      const pkg = existing
        ? await acquireRef(parseRef(existing.package), ctx.signal)
        : await acquirePackage(p.package.fqn, p.package.version, ctx.signal);
      const ref = { fqn: pkg.ref.fqn, version: pkg.ref.version, id: pkg.ref.id };
      if (!existing) {
        await database.db
          .insertInto('minicloud_environments')
          .values({
            name: p.env,
            state: 'deploying',
            package: refKey(ref),
            flow_id: p.flowId,
            updated_at: Date.now(),
          })
          .execute();
      }
      const inputs: DeployInputs = {
        env: p.env,
        packagePath: pkg.path,
        packageRef: ref,
        packageHit: pkg.hit,
        node: node.name,
        faults: p.faults,
      };
      localFlows.add(p.flowId);
      if (localFlows.size > 1000) localFlows.delete(localFlows.values().next().value!);
      hub.flowStarted(p.flowId, `${DEPLOY_FLOW} ${p.env}`, deployTaskNames());
      // The queue aborts `ctx.signal` when this worker closes or loses its claim: the flow is
      // suspended at a task boundary (not reverted) and the op handed back for another worker.
      const onAbort = () => void engine.suspend(p.flowId);
      ctx.signal.addEventListener('abort', onAbort, { once: true });
      let failed: FlowFailed | undefined;
      try {
        await runOrResume(p.flowId, inputs, ctx.signal);
      } catch (error) {
        await releasePackage(pkg);
        if (!(error instanceof FlowFailed)) {
          // Suspended or interrupted: leave the row and the log for the next owner.
          if (ctx.signal.aborted) throw error;
          await database.db
            .deleteFrom('minicloud_environments')
            .where('name', '=', p.env)
            .execute();
          throw error;
        }
        failed = error;
      } finally {
        ctx.signal.removeEventListener('abort', onAbort);
      }
      if (failed) {
        // Every resource was reverted: the environment is gone.
        await database.db.deleteFrom('minicloud_environments').where('name', '=', p.env).execute();
      } else {
        await database.db
          .updateTable('minicloud_environments')
          .set({ state: 'deployed', updated_at: Date.now() })
          .where('name', '=', p.env)
          .execute();
        envLeases.set(p.env, pkg);
      }
      await providerTree().catch(() => []);
      const outcome = outcomeOf(await engine.history(p.flowId));
      return {
        env: p.env,
        flowId: p.flowId,
        ...outcome,
        package: { ...ref, hit: pkg.hit, path: pkg.path },
        durationMs: Date.now() - started,
      };
    };

    /** The `delete` op: the destroy-graph teardown, on whichever worker claims it. */
    const deleteHandler = async (
      p: { env: string },
      ctx: HandlerContext,
    ): Promise<DeleteResult> => {
      await using _lock = await locks.acquire(`minicloud:env:${p.env}`, {
        timeoutMs: 30_000,
        signal: ctx.signal,
      });
      const row = await envRow(p.env);
      if (!row) throw new CommandError('minicloud.env_not_found', `no environment named ${p.env}`);
      await database.db
        .updateTable('minicloud_environments')
        .set({ state: 'deleting', updated_at: Date.now() })
        .where('name', '=', p.env)
        .execute();
      let planId = '';
      const objects: DeleteResult['objects'] = [];
      const notifications: DeleteResult['notifications'] = [];
      const report = await teardownEnvironment(database, reshape, p.env, {
        onNotify(subscriber, publisher) {
          notifications.push([subscriber, publisher]);
        },
        onPlan(plan) {
          planId = plan.id;
          hub.publish({ type: 'plan:set', plan });
        },
        onObject(id, state) {
          objects.push([id, state]);
          hub.publish({ type: 'plan:object', planId, id, state });
        },
      });
      // The environment row is gone; its package is released by whichever process holds it
      // (here at once, elsewhere by that process's reconcile tick).
      const ref = parseRef(row.package);
      const removedBefore = counters.removed.length;
      const pkg = envLeases.get(p.env);
      if (pkg) {
        envLeases.delete(p.env);
        await releasePackage(pkg); // the cache may drop an outdated copy on its last release
      }
      await cleanOutdated(ref);
      const packageRemoved = counters.removed
        .slice(removedBefore)
        .some((r) => refKey(r.ref) === refKey(ref))
        ? ref
        : null;
      await providerTree();
      return { ...report, package: ref, packageRemoved, objects, notifications };
    };

    const flowHandlers: FlowHandlers = { deploy: deployHandler, delete: deleteHandler };
    const flows = createQueue({
      backend: sqlBackend(database, { name: 'minicloud-flows' }),
      handlers: flowHandlers,
      concurrency: options.flowConcurrency ?? 2,
      policy: 'continue',
      worker: options.worker ?? true,
      leaseMs,
      closeGraceMs: 5000,
      logger: logger.child({ component: 'flows' }),
    });
    closers.push(() => flows.close());

    const queueKey = async (key: string): Promise<QueueKeyState> => {
      const info = await queue.inspect(key);
      const failed = info.blockedBy ? await queue.get(info.blockedBy) : undefined;
      return {
        key,
        status: info.status,
        running: info.running ? { id: info.running.id, type: info.running.type } : null,
        pending: info.pending.map((o) => ({ id: o.id, type: o.type, enqueuedAt: o.createdAt })),
        lastFailure: failed
          ? {
              opId: failed.id,
              type: failed.type,
              message: failed.error?.message ?? 'failed',
              at: failed.finishedAt ?? Date.now(),
            }
          : null,
      };
    };
    const watchMs = options.watchQueuesMs ?? (options.worker === false ? 1000 : 0);
    if (watchMs > 0) {
      let busy = false;
      const watch = setInterval(() => {
        if (busy) return;
        busy = true;
        void (async () => {
          const active = await queue.activeKeys({ limit: 200 });
          const keys = new Set([...active.map((k) => k.key), ...hub.busyKeys]);
          for (const key of keys) {
            const next = await queueKey(key);
            const previous = hub.state.queues.find((k) => k.key === key)?.lastFailure ?? null;
            hub.queueSnapshot({ ...next, lastFailure: next.lastFailure ?? previous });
          }
        })()
          .catch((error: unknown) => logger.warn({ err: error }, 'minicloud: queue watch failed'))
          .finally(() => (busy = false));
      }, watchMs);
      watch.unref();
      closers.push(() => Promise.resolve(clearInterval(watch)));
    }

    // Packages of environments deleted by another process are released here within a second.
    const reconcile = setInterval(() => {
      void (async () => {
        for (const [env, pkg] of envLeases) {
          if (await envRow(env)) continue;
          envLeases.delete(env);
          await releasePackage(pkg);
          await cleanOutdated(pkg.ref);
        }
      })().catch((error: unknown) => logger.warn({ err: error }, 'minicloud: reconcile failed'));
    }, 1000);
    reconcile.unref();
    closers.push(() => Promise.resolve(clearInterval(reconcile)));

    const localFlows = new Set<string>();
    /** Follows a flow's durable log while `done` is pending: live progress from any process. */
    const follow = (
      flowId: string,
      o: { onTask?: ((u: TaskUpdate) => void) | undefined; onPackage?: DeployOptions['onPackage'] },
      done: Promise<unknown>,
    ): Promise<void> => {
      let seq = 0;
      let announced = false;
      let finished = false;
      void done.finally(() => (finished = true)).catch(() => {});
      // Flows run by this process reach the hub through the engine's own events.
      const remote = () => !localFlows.has(flowId);
      const tick = async () => {
        if (!announced && o.onPackage) {
          const loaded = await engine.log.load(flowId);
          if (loaded) {
            announced = true;
            const i = loaded.record.inputs as unknown as DeployInputs;
            o.onPackage({ ...i.packageRef, hit: i.packageHit, path: i.packagePath });
          }
        }
        const entries: LogEntry[] = await engine.history(flowId);
        for (const e of entries) {
          if (e.seq <= seq) continue;
          seq = e.seq;
          if (e.task === null) {
            if (remote()) hub.flowState({ flowId, flow: DEPLOY_FLOW, state: e.state, at: e.at });
            continue;
          }
          if (e.subflow) continue;
          const update: TaskUpdate = {
            task: e.task,
            state: e.state,
            attempt: e.attempt ?? 1,
            at: e.at,
            failure: e.failure,
            result: e.result,
          };
          if (remote()) hub.taskState({ flowId, flow: DEPLOY_FLOW, ...update });
          o.onTask?.(update);
        }
      };
      return (async () => {
        while (!finished) {
          await tick().catch(() => {});
          await Promise.race([sleep(100), done.catch(() => {})]);
        }
        await tick().catch(() => {});
        localFlows.delete(flowId);
      })();
    };

    async function deployEnvironment(env: string, o: DeployOptions): Promise<DeployResult> {
      checkEnv(env);
      if (!o?.package?.fqn || !o.package.version)
        throw invalid('package.fqn and package.version are required');
      const stepMs = o.faults?.stepMs;
      if (stepMs != null && (!Number.isInteger(stepMs) || stepMs < 0 || stepMs > 60_000))
        throw invalid(`faults.stepMs must be an integer from 0 to 60000, got ${String(stepMs)}`);
      const flowId = `deploy-${env}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
      const payload: DeployPayload = {
        env,
        flowId,
        package: { fqn: o.package.fqn, version: o.package.version },
        faults: {
          vmFailOnce: [...(o.faults?.vmFailOnce ?? [])],
          failStep: o.faults?.failStep ?? null,
          stallOnce: o.faults?.stallOnce ?? null,
          stepMs: o.faults?.stepMs ?? null,
        },
        lockTimeoutMs: o.lockTimeoutMs ?? 30_000,
      };
      const done = flows.call(
        `env:${env}`,
        { type: 'deploy', payload },
        o.signal ? { signal: o.signal } : {},
      );
      const following = follow(flowId, o, done);
      try {
        const result = await done;
        await following;
        if (result.package.hit) counters.hits++;
        else counters.misses++;
        publishCache();
        return result;
      } catch (error) {
        await following;
        throw unwrapOpError(error);
      }
    }

    async function deleteEnvironment(
      env: string,
      hooks: TeardownHooks = {},
    ): Promise<DeleteResult> {
      checkEnv(env);
      let result: DeleteResult;
      try {
        result = await flows.call(`env:${env}`, { type: 'delete', payload: { env } });
      } catch (error) {
        throw unwrapOpError(error);
      }
      // Replayed for the caller (the teardown may have run in another process).
      hooks.onPlan?.(result.plan, result.planText);
      for (const [subscriber, publisher] of result.notifications) {
        hooks.onNotify?.(subscriber, publisher);
      }
      for (const [id, state] of result.objects) hooks.onObject?.(id, state);
      if (result.plan.id !== hub.state.plan?.id) {
        hub.publish({ type: 'plan:set', plan: result.plan });
        for (const [id, state] of result.objects)
          hub.publish({ type: 'plan:object', planId: result.plan.id, id, state });
      }
      return result;
    }

    const cloud: Cloud = {
      database,
      dataDir,
      logger,
      reshape,
      locks,
      engine,
      queue,
      flows,
      packages,
      repository,
      hub,
      node,
      cacheCounters: counters,
      nodeUuid,
      providerTree,
      startupReshape: (o = {}) => runReshape(o.seed ?? true, false),
      offlineReshape: () => runReshape(false, true),

      async uploadPackage(fqn, version, files) {
        const ref = await repository.upload(fqn, version, files);
        return { fqn: ref.fqn, version: ref.version, id: ref.id };
      },

      async prefetchPackage(fqn, version) {
        const before = counters.removed.length;
        const pkg = await acquirePackage(fqn, version);
        if (pkg.hit) counters.hits++;
        else counters.misses++;
        await releasePackage(pkg); // publishes the counters
        const removed = counters.removed.slice(before).map((r) => r.ref);
        // In use by an environment, whichever process deployed it.
        const keptInUse = (await cloud.environments())
          .map((e) => parseRef(e.package))
          .filter((r) => r.fqn === fqn && r.version === version && r.id !== pkg.ref.id);
        return { ref: pkg.ref, hit: pkg.hit, removed, keptInUse };
      },

      deployEnvironment,
      deleteEnvironment,

      async environments() {
        const rows = await database.db
          .selectFrom('minicloud_environments')
          .selectAll()
          .orderBy('name')
          .execute();
        return rows.map((r) => ({
          name: r.name,
          state: r.state,
          package: r.package,
          flowId: r.flow_id,
        }));
      },

      async castContainerOp(container, type, payload = {}) {
        if (typeof container !== 'string' || !CONTAINER_NAME.test(container)) {
          throw invalid(
            `container name must be 1-128 letters, digits, '_', '.' or '-', got ${JSON.stringify(container)}`,
          );
        }
        if (!CONTAINER_OPS.includes(type)) {
          throw invalid(
            `container operation must be one of ${CONTAINER_OPS.join(', ')}, got ${JSON.stringify(type)}`,
          );
        }
        return queue.cast(container, { type, payload } as never);
      },

      async containers() {
        const rows = await database.db
          .selectFrom('minicloud_containers')
          .selectAll()
          .orderBy('name')
          .execute();
        return rows.map((r) => ({ name: r.name, image: r.image, state: r.state }));
      },

      queueKey,
      publishCache,

      async close() {
        for (const close of closers.splice(0).reverse()) {
          try {
            await close();
          } catch (error) {
            logger.warn({ err: error }, 'minicloud: error while closing');
          }
        }
      },
      [Symbol.asyncDispose]() {
        return cloud.close();
      },
    };
    return cloud;
  } catch (error) {
    for (const close of closers.splice(0).reverse()) await close().catch(() => {});
    throw error;
  }
}

export type { ContainerOpResult, ReshapeOutcome };
export { RiggingError };
