import { sleep, type Clock } from '@rigging/core';
import type { HandlerContext } from '@rigging/async-queue';
import type { SqlLockProvider } from '@rigging/locks/sql';
import { refKey, type CachedPackage, type PackageRef } from '@rigging/package-cache';
import type { ReshapeStore } from '@rigging/reshape';
import type { Database } from '@rigging/sql';
import { FlowFailed, resumableReason, type Engine, type LogEntry } from '@rigging/tasks';
import { MinicloudError } from '../errors.js';
import type { MinicloudTables } from '../migrations.js';
import type { CacheView } from './cache-view.js';
import { findNode, type ComputeNodeSpec } from './compute.js';
import {
  deployFlow,
  deployTaskNames,
  DEPLOY_FLOW,
  type DeployFaults,
  type DeployInputs,
} from './deploy.js';
import type { CloudHub } from './events.js';
import { outcomeOf, type TaskUpdate } from './flows.js';
import { teardownEnvironment, type TeardownReport } from './teardown.js';

/** Options of `Cloud.deployEnvironment`. */
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

/** What `Cloud.deployEnvironment` did (a failed flow is a result, not an exception). */
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

/** What a `deploy` op carries (the producer picks the flow id, so a takeover resumes it). */
export interface DeployPayload {
  env: string;
  flowId: string;
  package: { fqn: string; version: string };
  faults: DeployInputs['faults'];
  lockTimeoutMs: number;
}

/** What `Cloud.deleteEnvironment` did. */
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

/** `fqn/version/id` as stored in an environment row, back to a ref. */
export function parseRef(text: string): PackageRef {
  const [fqn = '', version = '', id = ''] = text.split('/');
  return { fqn, version, id };
}

/** What {@link EnvironmentFlows} works with. @internal */
export interface EnvironmentFlowsDeps {
  database: Database<MinicloudTables>;
  reshape: ReshapeStore;
  engine: Engine;
  locks: SqlLockProvider;
  hub: CloudHub;
  cache: CacheView;
  node: ComputeNodeSpec;
  clock: Clock;
  /** The lock lease: how long a dead owner's flow lock outlives it. */
  leaseMs: number;
  /** Reads (and publishes) the provider tree after a deployment or teardown. */
  providerTree(): Promise<unknown>;
}

/**
 * The deploy and delete flows of environments, as the flows queue runs them on whichever
 * worker claims an op (first run or takeover), and the packages this process holds for the
 * environments it deployed.
 * @internal
 */
export class EnvironmentFlows {
  /** The queue handlers (`deploy`, `delete`). */
  readonly handlers: FlowHandlers = {
    deploy: (payload, ctx) => this.#deploy(payload, ctx),
    delete: (payload, ctx) => this.#delete(payload, ctx),
  };
  readonly #deps: EnvironmentFlowsDeps;
  readonly #flow: ReturnType<typeof deployFlow>;
  /** The cached package of each environment this process deployed, held while it exists. */
  readonly #leases = new Map<string, CachedPackage>();
  /** Flows run by this process: they reach the hub through the engine's own events. */
  readonly #localFlows = new Set<string>();

  constructor(deps: EnvironmentFlowsDeps) {
    this.#deps = deps;
    const { reshape, node } = deps;
    this.#flow = deployFlow({
      database: deps.database,
      reshape,
      clock: deps.clock,
      nodeUuid: async () => {
        const uuid = await findNode(reshape, node.name);
        if (!uuid) {
          throw new MinicloudError(
            'minicloud.no_compute_node',
            `compute node ${node.name} does not exist; run the startup reshape first`,
          );
        }
        return uuid;
      },
    });
  }

  /** An environment's row, if it exists. */
  row(env: string) {
    return this.#deps.database.db
      .selectFrom('minicloud_environments')
      .selectAll()
      .where('name', '=', env)
      .executeTakeFirst();
  }

  /**
   * Releases the packages of environments deleted by another process (called every second) and
   * drops their outdated copies.
   */
  async reconcile(): Promise<void> {
    for (const [env, pkg] of this.#leases) {
      if (await this.row(env)) continue;
      this.#leases.delete(env);
      await this.#deps.cache.release(pkg);
      await this.#deps.cache.cleanOutdated(pkg.ref);
    }
  }

  /** Releases every package held for an environment (the cloud closes). */
  async releaseAll(): Promise<void> {
    for (const pkg of this.#leases.values()) await pkg.release();
    this.#leases.clear();
  }

  /**
   * Follows a flow's durable log while `done` is pending: live progress from any process, to the
   * caller's `onPackage`/`onTask` and (for flows another process runs) to the hub.
   */
  async follow(
    flowId: string,
    o: Pick<DeployOptions, 'onTask' | 'onPackage'>,
    done: Promise<unknown>,
  ): Promise<void> {
    const { engine, hub } = this.#deps;
    let seq = 0;
    let announced = false;
    let finished = false;
    void done.finally(() => (finished = true)).catch(() => {});
    const remote = () => !this.#localFlows.has(flowId);
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
    while (!finished) {
      await tick().catch(() => {});
      await Promise.race([sleep(100), done.catch(() => {})]);
    }
    await tick().catch(() => {});
    this.#localFlows.delete(flowId);
  }

  /** Acquires the environment's package and records the environment (first run only). */
  async #takePackage(p: DeployPayload, signal: AbortSignal): Promise<CachedPackage> {
    const { database, cache, clock } = this.#deps;
    const existing = await this.row(p.env);
    if (existing && existing.flow_id !== p.flowId) {
      throw new MinicloudError(
        'minicloud.env_exists',
        `environment ${p.env} already exists (${existing.state}); delete it first`,
      );
    }
    // A takeover keeps the package the first owner deployed with (even if re-uploaded since).
    if (existing) return cache.acquireRef(parseRef(existing.package), signal);
    const pkg = await cache.acquire(p.package.fqn, p.package.version, signal);
    await database.db
      .insertInto('minicloud_environments')
      .values({
        name: p.env,
        state: 'deploying',
        package: refKey(pkg.ref),
        flow_id: p.flowId,
        updated_at: clock.now(),
      })
      .execute();
    return pkg;
  }

  /** The `deploy` op: on whichever worker claims it (first run or takeover). */
  async #deploy(p: DeployPayload, ctx: HandlerContext): Promise<DeployResult> {
    const { database, engine, locks, hub, cache, node, clock } = this.#deps;
    const started = clock.now();
    await using _lock = await locks.acquire(`minicloud:env:${p.env}`, {
      timeoutMs: p.lockTimeoutMs,
      signal: ctx.signal,
    });
    const pkg = await this.#takePackage(p, ctx.signal);
    const ref = { fqn: pkg.ref.fqn, version: pkg.ref.version, id: pkg.ref.id };
    const inputs: DeployInputs = {
      env: p.env,
      packagePath: pkg.path,
      packageRef: ref,
      packageHit: pkg.hit,
      node: node.name,
      faults: p.faults,
    };
    this.#localFlows.add(p.flowId);
    if (this.#localFlows.size > 1000) {
      this.#localFlows.delete(this.#localFlows.values().next().value!);
    }
    hub.flowStarted(p.flowId, `${DEPLOY_FLOW} ${p.env}`, deployTaskNames());
    let failed: FlowFailed | undefined;
    try {
      // Runs the flow, or resumes it after a takeover, under the queue's claim on the op (its
      // token fences the flow's writes). The queue aborts `ctx.signal` when this worker closes
      // or loses its claim: the flow is then suspended at a task boundary, not reverted.
      await engine.runOrResume(this.#flow, {
        flowId: p.flowId,
        inputs,
        signal: ctx.signal,
        lease: ctx.lease,
        pollMs: Math.min(500, this.#deps.leaseMs / 4),
      });
    } catch (error) {
      await cache.release(pkg);
      if (!(error instanceof FlowFailed)) {
        // Suspended or interrupted: leave the row and the log for the next owner.
        const reason = resumableReason(error, engine.log, ctx.signal);
        if (reason || ctx.signal.aborted)
          ctx.giveBack(`deploy ${p.env}: its flow can be resumed (${reason ?? 'stopped'})`);
        await this.#deleteRow(p.env);
        throw error;
      }
      failed = error;
    }
    if (failed) {
      // Every resource was reverted: the environment is gone.
      await this.#deleteRow(p.env);
    } else {
      await database.db
        .updateTable('minicloud_environments')
        .set({ state: 'deployed', updated_at: clock.now() })
        .where('name', '=', p.env)
        .execute();
      this.#leases.set(p.env, pkg);
    }
    await this.#deps.providerTree().catch(() => []);
    const outcome = outcomeOf(await engine.history(p.flowId));
    return {
      env: p.env,
      flowId: p.flowId,
      ...outcome,
      package: { ...ref, hit: pkg.hit, path: pkg.path },
      durationMs: clock.now() - started,
    };
  }

  /** The `delete` op: the destroy-graph teardown, on whichever worker claims it. */
  async #delete(p: { env: string }, ctx: HandlerContext): Promise<DeleteResult> {
    const { database, reshape, locks, hub, cache, clock } = this.#deps;
    await using _lock = await locks.acquire(`minicloud:env:${p.env}`, {
      timeoutMs: 30_000,
      signal: ctx.signal,
    });
    const row = await this.row(p.env);
    if (!row) throw new MinicloudError('minicloud.env_not_found', `no environment named ${p.env}`);
    await database.db
      .updateTable('minicloud_environments')
      .set({ state: 'deleting', updated_at: clock.now() })
      .where('name', '=', p.env)
      .execute();
    let planId = '';
    const objects: DeleteResult['objects'] = [];
    const notifications: DeleteResult['notifications'] = [];
    const report = await teardownEnvironment({ database, reshape, clock }, p.env, {
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
    const removedBefore = cache.counters.removed.length;
    const pkg = this.#leases.get(p.env);
    if (pkg) {
      this.#leases.delete(p.env);
      await cache.release(pkg); // the cache may drop an outdated copy on its last release
    }
    await cache.cleanOutdated(ref);
    const packageRemoved = cache.counters.removed
      .slice(removedBefore)
      .some((r) => refKey(r.ref) === refKey(ref))
      ? ref
      : null;
    await this.#deps.providerTree();
    return { ...report, package: ref, packageRemoved, objects, notifications };
  }

  async #deleteRow(env: string): Promise<void> {
    await this.#deps.database.db
      .deleteFrom('minicloud_environments')
      .where('name', '=', env)
      .execute();
  }
}
