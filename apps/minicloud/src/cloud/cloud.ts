import type { Clock, Logger } from '@rigging/core';
import { handlerError, type Queue } from '@rigging/async-queue';
import type { SqlLockProvider } from '@rigging/locks/sql';
import type { PackageCache, PackageRef } from '@rigging/package-cache';
import type { ReshapeStore } from '@rigging/reshape';
import type { Engine } from '@rigging/tasks';
import type { Database } from '@rigging/sql';
import type { ProviderNode, QueueKeyState, ReshapeRecord } from '../wire.js';
import { MinicloudError } from '../errors.js';
import type { MinicloudTables } from '../migrations.js';
import type { CacheCounters, CacheView } from './cache-view.js';
import {
  findNode,
  reshapeNode,
  treeSnapshot,
  type ComputeNodeSpec,
  type ReshapeOutcome,
} from './compute.js';
import { CONTAINER_OPS, type ContainerOpPayload, type ContainerOpType } from './containers.js';
import {
  parseRef,
  type DeleteResult,
  type DeployOptions,
  type DeployPayload,
  type DeployResult,
  type EnvironmentFlows,
  type FlowHandlers,
} from './environments.js';
import type { CloudHub } from './events.js';
import type { PackageRepository, PackageFile } from './repository.js';
import type { TeardownHooks } from './teardown.js';
import type { Closers } from './closers.js';
import type { ContainerHandlers, PrefetchResult } from './types.js';
import { queueKeyState } from './watch.js';

const ENV_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const CONTAINER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** A `minicloud.invalid_input` error: bad input, refused before anything changed. @internal */
export function invalid(message: string): MinicloudError {
  return new MinicloudError('minicloud.invalid_input', message);
}

function checkEnv(env: unknown): string {
  if (typeof env !== 'string' || !ENV_NAME.test(env)) {
    throw invalid(
      `environment name must be 1-63 lowercase letters, digits or '-', got ${JSON.stringify(env)}`,
    );
  }
  return env;
}

/** The deploy op a {@link DeployOptions} asks for (checked before anything is queued). */
function deployPayload(env: string, o: DeployOptions, clock: Clock): DeployPayload {
  checkEnv(env);
  if (!o?.package?.fqn || !o.package.version)
    throw invalid('package.fqn and package.version are required');
  const stepMs = o.faults?.stepMs;
  if (stepMs != null && (!Number.isInteger(stepMs) || stepMs < 0 || stepMs > 60_000))
    throw invalid(`faults.stepMs must be an integer from 0 to 60000, got ${String(stepMs)}`);
  const suffix = `${clock.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  return {
    env,
    flowId: `deploy-${env}-${suffix}`,
    package: { fqn: o.package.fqn, version: o.package.version },
    faults: {
      vmFailOnce: [...(o.faults?.vmFailOnce ?? [])],
      failStep: o.faults?.failStep ?? null,
      stallOnce: o.faults?.stallOnce ?? null,
      stepMs: o.faults?.stepMs ?? null,
    },
    lockTimeoutMs: o.lockTimeoutMs ?? 30_000,
  };
}

/** What a {@link Cloud} is made of (`openCloud` opens each part). @internal */
export interface CloudParts extends Pick<
  Cloud,
  | 'database'
  | 'dataDir'
  | 'logger'
  | 'reshape'
  | 'locks'
  | 'engine'
  | 'queue'
  | 'flows'
  | 'packages'
  | 'repository'
  | 'hub'
  | 'node'
> {
  clock: Clock;
  cache: CacheView;
  environments: EnvironmentFlows;
  closers: Closers;
}

/**
 * The composition of every package into one control plane, as {@link openCloud} opens it:
 * database, reshape store, task engine (SQL log, SQL locks), container-op queue (SQL jobboard),
 * package cache (HTTP fetcher from the cloud's own package repository) and an event hub in the
 * dashboard's shape. Close it with `await using` or {@link Cloud.close}.
 */
export class Cloud implements AsyncDisposable {
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
  readonly #clock: Clock;
  readonly #cache: CacheView;
  readonly #environments: EnvironmentFlows;
  readonly #closers: Closers;

  /** @internal use {@link openCloud}. */
  constructor(parts: CloudParts) {
    this.database = parts.database;
    this.dataDir = parts.dataDir;
    this.logger = parts.logger;
    this.reshape = parts.reshape;
    this.locks = parts.locks;
    this.engine = parts.engine;
    this.queue = parts.queue;
    this.flows = parts.flows;
    this.packages = parts.packages;
    this.repository = parts.repository;
    this.hub = parts.hub;
    this.node = parts.node;
    this.#clock = parts.clock;
    this.#cache = parts.cache;
    this.#environments = parts.environments;
    this.#closers = parts.closers;
  }

  /** The cache counters (hits, misses, downloads, removals) seen by this process. */
  get cacheCounters(): CacheCounters {
    return this.#cache.counters;
  }

  /** The compute node's root provider uuid (undefined before it exists). */
  nodeUuid(): Promise<string | undefined> {
    return findNode(this.reshape, this.node.name);
  }

  /** The node's provider tree with usages (also published as `providers:tree`). */
  providerTree(): Promise<ProviderNode[]> {
    return publishTree(this.reshape, this.node, this.hub);
  }

  /**
   * Service startup: seeds the legacy node when missing (`seed`, default true), then runs the
   * resource-tracker flow with reshapes allowed. Publishes `providers:reshape` when reshaped.
   */
  startupReshape(options: { seed?: boolean } = {}): Promise<ReshapeOutcome> {
    return this.#runReshape(options.seed ?? true, false);
  }

  /** The offline upgrade path: the same reshape without seeding (`minicloud reshape`). */
  offlineReshape(): Promise<ReshapeOutcome> {
    return this.#runReshape(false, true);
  }

  async #runReshape(seed: boolean, offline: boolean): Promise<ReshapeOutcome> {
    const { node, hub } = this;
    const outcome = await reshapeNode(this.reshape, node, {
      seed,
      offline,
      logger: this.logger.child({ component: 'reshape' }),
      clock: this.#clock,
    });
    if (outcome.reshaped) {
      const record: ReshapeRecord = {
        at: this.#clock.now(),
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
  }

  /** Uploads a package version to the repository (a new upload id each time). */
  async uploadPackage(
    fqn: string,
    version: string,
    files: readonly PackageFile[],
  ): Promise<PackageRef> {
    const ref = await this.repository.upload(fqn, version, files);
    return { fqn: ref.fqn, version: ref.version, id: ref.id };
  }

  /** Downloads the current upload of a package into the cache (and releases it). */
  async prefetchPackage(fqn: string, version: string): Promise<PrefetchResult> {
    const cache = this.#cache;
    const before = cache.counters.removed.length;
    const pkg = await cache.acquire(fqn, version);
    await cache.release(pkg);
    cache.count(pkg.hit);
    const removed = cache.counters.removed.slice(before).map((r) => r.ref);
    // In use by an environment, whichever process deployed it.
    const keptInUse = (await this.environments())
      .map((e) => parseRef(e.package))
      .filter((r) => r.fqn === fqn && r.version === version && r.id !== pkg.ref.id);
    return { ref: pkg.ref, hit: pkg.hit, removed, keptInUse };
  }

  /**
   * Deploys an environment: a `deploy` op on the flows queue, run by a worker (this process
   * when it is one) as a task flow under the environment's lock; see {@link DeployResult}.
   */
  async deployEnvironment(env: string, options: DeployOptions): Promise<DeployResult> {
    const payload = deployPayload(env, options, this.#clock);
    const done = this.flows.call(
      `env:${env}`,
      { type: 'deploy', payload },
      options.signal ? { signal: options.signal } : {},
    );
    const following = this.#environments.follow(payload.flowId, options, done);
    try {
      const result = await done;
      await following;
      this.#cache.count(result.package.hit);
      return result;
    } catch (error) {
      await following;
      throw handlerError(error);
    }
  }

  /**
   * Tears an environment down with the destroy graph (a `delete` op on the flows queue) and
   * releases its package. `hooks` see the plan, notifications and object states.
   */
  async deleteEnvironment(env: string, hooks: TeardownHooks = {}): Promise<DeleteResult> {
    checkEnv(env);
    let result: DeleteResult;
    try {
      result = await this.flows.call(`env:${env}`, { type: 'delete', payload: { env } });
    } catch (error) {
      throw handlerError(error);
    }
    // Replayed for the caller (the teardown may have run in another process).
    hooks.onPlan?.(result.plan, result.planText);
    for (const [subscriber, publisher] of result.notifications) {
      hooks.onNotify?.(subscriber, publisher);
    }
    for (const [id, state] of result.objects) hooks.onObject?.(id, state);
    if (result.plan.id !== this.hub.state.plan?.id) {
      this.hub.publish({ type: 'plan:set', plan: result.plan });
      for (const [id, state] of result.objects)
        this.hub.publish({ type: 'plan:object', planId: result.plan.id, id, state });
    }
    return result;
  }

  /** Environments and their states. */
  async environments(): Promise<
    { name: string; state: string; package: string; flowId: string }[]
  > {
    const rows = await this.database.db
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
  }

  /** Casts a container op to the queue (key = container name); resolves with the op id. */
  async castContainerOp(
    container: string,
    type: ContainerOpType,
    payload: ContainerOpPayload = {},
  ): Promise<string> {
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
    return this.queue.cast(container, { type, payload } as never);
  }

  /** Containers of the simulated runtime. */
  async containers(): Promise<{ name: string; image: string; state: string }[]> {
    const rows = await this.database.db
      .selectFrom('minicloud_containers')
      .selectAll()
      .orderBy('name')
      .execute();
    return rows.map((r) => ({ name: r.name, image: r.image, state: r.state }));
  }

  /** A container queue key as the queue's store sees it (any process's work), dashboard-shaped. */
  queueKey(key: string): Promise<QueueKeyState> {
    return queueKeyState(this.queue, key, this.#clock);
  }

  /** Publishes the cache state (`cache:update`). */
  publishCache(): void {
    this.#cache.publish();
  }

  /** Stops the queue and the repository, releases packages, closes what the cloud opened. */
  close(): Promise<void> {
    return this.#closers.closeAll();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** Reads the node's provider tree with usages and publishes it (`providers:tree`). @internal */
export async function publishTree(
  reshape: ReshapeStore,
  node: ComputeNodeSpec,
  hub: CloudHub,
): Promise<ProviderNode[]> {
  const uuid = await findNode(reshape, node.name);
  const nodes = uuid ? await treeSnapshot(reshape, uuid) : [];
  hub.publish({ type: 'providers:tree', nodes });
  return nodes;
}
