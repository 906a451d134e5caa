import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RiggingError, type Clock } from '@rigging/core';
import { retryOnConflict, type ReshapeStore } from '@rigging/reshape';
import { linearFlow, task, times, unorderedFlow, type Flow, type Task } from '@rigging/tasks';
import { refKey, type PackageRef } from '@rigging/package-cache';
import type { Database } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';
import { gpuName } from './compute.js';
import { journal } from './journal.js';

/** Fault injection for a deployment (for the demo and tests). */
export interface DeployFaults {
  /** VM task names (`vm-2`) that fail on their first attempt (then the retry succeeds). */
  vmFailOnce?: readonly string[];
  /** A task name that always fails (`health-check`), so the whole flow rolls back. */
  failStep?: string | null;
  /**
   * A VM task name (`vm-2`) that, the first time any process runs it for this flow, records a
   * `stall` row in `minicloud_journal` (with its pid) and then hangs before doing anything: the
   * chaos demo SIGKILLs that process there, and the worker that takes the flow over goes on.
   */
  stallOnce?: string | null;
  /** Simulated duration of every step in ms (a slow deployment). @default 40 */
  stepMs?: number | null;
}

/** The inputs of the deploy flow (stored in the task log, so another process can resume it). */
export interface DeployInputs {
  env: string;
  packagePath: string;
  packageRef: PackageRef;
  /** Whether the package was already in the cache (for progress output; no task needs it). */
  packageHit: boolean;
  node: string;
  faults: {
    vmFailOnce: string[];
    failStep: string | null;
    stallOnce: string | null;
    stepMs: number | null;
  };
}

/** What a VM task provides. */
export interface VmResult {
  id: string;
  name: string;
  consumer: string;
  gpu: string;
  allocations: Record<string, Record<string, number>>;
}

type AnyInputs = any;

export const DEPLOY_FLOW = 'deploy-environment';
/** Resources of one VM in the reshape store. */
const VM_RESOURCES = { root: { VCPU: 2, MEMORY_MB: 4096, DISK_GB: 20 }, gpu: { VGPU: 1 } };
/** Simulated duration of one step. */
const STEP_MS = 40;
/** How long a `stallOnce` task hangs (the chaos demo kills its process long before). */
const STALL_MS = 120_000;

/** A stable UUID for (flow, task), so a re-run of a task after a crash writes the same consumer. */
function consumerUuid(flowId: string, name: string): string {
  const h = createHash('sha256').update(`${flowId}/${name}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export interface DeployDeps {
  database: Database<MinicloudTables>;
  reshape: ReshapeStore;
  /** The compute node's root provider uuid. */
  nodeUuid(): Promise<string>;
  /** The time of resource and journal rows, and of the simulated step durations. */
  clock: Clock;
}

/**
 * The tasks of the deploy flow. Every task records its resource in `minicloud_resources` and
 * its revert removes it; a simulated step first waits `stepMs` on the clock, then fails if told.
 */
class DeployTasks {
  readonly #deps: DeployDeps;
  readonly #db: Database<MinicloudTables>['db'];

  constructor(deps: DeployDeps) {
    this.#deps = deps;
    this.#db = deps.database.db;
  }

  /** Records a resource (replacing the row of an earlier run of the same task). */
  async #put(id: string, env: string, type: string, data: unknown, consumer: string | null = null) {
    await this.#db.deleteFrom('minicloud_resources').where('id', '=', id).execute();
    await this.#db
      .insertInto('minicloud_resources')
      .values({
        id,
        env,
        type,
        consumer,
        data: JSON.stringify(data),
        created_at: this.#deps.clock.now(),
      })
      .execute();
  }

  async #drop(id: string): Promise<void> {
    await this.#db.deleteFrom('minicloud_resources').where('id', '=', id).execute();
  }

  /** See {@link DeployFaults.stallOnce}. */
  async #stallOnce(ref: string, signal: AbortSignal): Promise<void> {
    const seen = await this.#db
      .selectFrom('minicloud_journal')
      .select('pid')
      .where('kind', '=', 'stall')
      .where('ref', '=', ref)
      .executeTakeFirst();
    if (seen) return journal(this.#db, this.#deps.clock, 'stall-passed', ref);
    await journal(this.#db, this.#deps.clock, 'stall', ref);
    await this.#deps.clock.sleep(STALL_MS, { signal });
  }

  /** The simulated work of a step. */
  #work(faults: DeployInputs['faults'], signal: AbortSignal): Promise<void> {
    return this.#deps.clock.sleep(faults.stepMs ?? STEP_MS, { signal });
  }

  /** The `failStep` fault, if it names step `name`. */
  #failIf(name: string, faults: DeployInputs['faults']): void {
    if (faults.failStep === name) {
      throw new RiggingError(
        'minicloud.step_failed',
        `${name} failed (deliberately, to show the rollback)`,
      );
    }
  }

  /**
   * A task that records one resource, `<env>/<suffix>` of `type` with `data`, and provides its
   * id; its revert removes it.
   */
  #resource(
    spec: { name: string; requires: string[]; provides: string },
    resource: { suffix: string; type: string; data: unknown },
  ): Task<any, any> {
    return task({
      ...spec,
      execute: async (ctx, inputs: AnyInputs) => {
        const { env, faults } = inputs as DeployInputs;
        await this.#work(faults, ctx.signal);
        this.#failIf(spec.name, faults);
        const id = `${env}/${resource.suffix}`;
        await this.#put(id, env, resource.type, resource.data);
        return id;
      },
      revert: async (_ctx, { result }) => {
        if (result) await this.#drop(result as string);
      },
    });
  }

  network(): Task<any, any> {
    return this.#resource(
      { name: 'create-network', requires: ['env', 'faults'], provides: 'networkId' },
      { suffix: 'net', type: 'network', data: { cidr: '10.0.0.0/24' } },
    );
  }

  /** Volume `n` (from 1). */
  volume(n: number): Task<any, any> {
    return this.#resource(
      { name: `volume-${n}`, requires: ['env', 'faults', 'networkId'], provides: `volume${n}` },
      { suffix: `vol-${n}`, type: 'volume', data: { sizeGb: 20 } },
    );
  }

  /** VM `n` (from 1): its allocations in the reshape store, a VGPU when a GPU has one free. */
  vm(n: number): Task<any, any> {
    const name = `vm-${n}`;
    return task({
      name,
      requires: ['env', 'faults', 'node', 'networkId', `volume${n}`],
      provides: `vm${n}`,
      retry: times(2, 50),
      execute: async (ctx, inputs: AnyInputs) => {
        const { env, faults, node } = inputs as DeployInputs;
        if (faults.stallOnce === name) await this.#stallOnce(`${ctx.flowId}/${name}`, ctx.signal);
        await this.#work(faults, ctx.signal);
        if (faults.vmFailOnce.includes(name) && ctx.attempt === 1) {
          throw new RiggingError(
            'minicloud.vm_boot_timeout',
            `${name}: hypervisor on ${node} timed out booting it`,
          );
        }
        this.#failIf(name, faults);
        const consumer = consumerUuid(ctx.flowId, name);
        const chosen = await this.#allocate(consumer, env, node);
        const id = `${env}/${name}`;
        const result: VmResult = {
          id,
          name,
          consumer,
          gpu: chosen.gpu?.name ?? 'none',
          allocations: chosen.allocations,
        };
        const volume = inputs[`volume${n}`] as string;
        const data = { gpu: result.gpu, network: inputs.networkId, volume };
        await this.#put(id, env, 'vm', data, consumer);
        return result;
      },
      revert: async (_ctx, { result }) => {
        const vm = result as VmResult | null;
        if (!vm) return;
        try {
          await this.#deps.reshape.deleteAllocations(vm.consumer);
        } catch (error) {
          if (!RiggingError.hasCode(error, 'reshape.consumer_not_found')) throw error;
        }
        await this.#drop(vm.id);
      },
    });
  }

  /**
   * Allocates a VM's resources to `consumer` on the node's root provider, plus a VGPU on the
   * first GPU with one free (none when all are taken), again on a generation conflict.
   */
  async #allocate(consumer: string, env: string, node: string) {
    const { reshape } = this.#deps;
    const root = await this.#deps.nodeUuid();
    const gpuPrefix = gpuName(node, 0).slice(0, -1);
    return retryOnConflict(
      async () => {
        const providers = await reshape.listProviders({ inTree: root });
        for (const gpu of providers.filter((p) => p.name.startsWith(gpuPrefix))) {
          const [inv, use] = await Promise.all([
            reshape.getInventories(gpu.uuid),
            reshape.getUsages(gpu.uuid),
          ]);
          const v = inv.inventories.VGPU;
          if (v && (v.total - v.reserved) * v.allocationRatio - (use.usages.VGPU ?? 0) >= 1)
            return gpu;
        }
        return undefined;
      },
      async (gpu) => {
        const allocations: Record<string, Record<string, number>> = {
          [root]: { ...VM_RESOURCES.root },
        };
        if (gpu) allocations[gpu.uuid] = { ...VM_RESOURCES.gpu };
        await reshape.setAllocations(consumer, {
          projectId: 'minicloud',
          userId: env,
          allocations,
        });
        return { gpu, allocations };
      },
    );
  }

  /** The application's config, from the package's manifest; needs every VM. */
  configure(vmCount: number): Task<any, any> {
    const vms = Array.from({ length: vmCount }, (_, i) => `vm${i + 1}`);
    return task({
      name: 'configure-app',
      requires: ['env', 'faults', 'packagePath', 'packageRef', ...vms],
      provides: 'appConfig',
      execute: async (ctx, anyInputs: AnyInputs) => {
        const inputs = anyInputs as DeployInputs;
        await this.#work(inputs.faults, ctx.signal);
        this.#failIf('configure-app', inputs.faults);
        const manifest = JSON.parse(
          await readFile(join(inputs.packagePath, 'manifest.json'), 'utf8'),
        ) as { name: string; port: number };
        const id = `${inputs.env}/app-config`;
        await this.#put(id, inputs.env, 'app-config', {
          app: manifest.name,
          port: manifest.port,
          package: refKey(inputs.packageRef),
        });
        return { id, app: manifest.name, port: manifest.port };
      },
      revert: async (_ctx, { result }) => {
        const r = result as { id: string } | null;
        if (r) await this.#drop(r.id);
      },
    });
  }

  health(): Task<any, any> {
    return task({
      name: 'health-check',
      requires: ['env', 'faults', 'appConfig'],
      execute: async (ctx, inputs: AnyInputs) => {
        const { env, faults } = inputs as DeployInputs;
        await this.#work(faults, ctx.signal);
        if (faults.failStep === 'health-check') {
          throw new RiggingError(
            'minicloud.health_check_failed',
            `${env}: the application answered HTTP 503 (deliberate failure)`,
          );
        }
        return 'healthy';
      },
    });
  }
}

/**
 * The deployment as a task flow: network → volumes → VMs (allocations in the reshape store) →
 * application config → health check. Every task records its resource in
 * `minicloud_resources` and its revert removes it.
 */
export function deployFlow(
  deps: DeployDeps,
  vmCount = 3,
): Flow<DeployInputs, Record<string, unknown>> {
  const tasks = new DeployTasks(deps);
  const each = <T>(make: (n: number) => T) =>
    Array.from({ length: vmCount }, (_, i) => make(i + 1));
  return linearFlow(
    DEPLOY_FLOW,
    tasks.network(),
    unorderedFlow('volumes', ...each((n) => tasks.volume(n))),
    unorderedFlow('vms', ...each((n) => tasks.vm(n))),
    tasks.configure(vmCount),
    tasks.health(),
  ) as unknown as Flow<DeployInputs, Record<string, unknown>>;
}

/** Task names of {@link deployFlow}, in flow order. */
export function deployTaskNames(vmCount = 3): string[] {
  return [
    'create-network',
    ...Array.from({ length: vmCount }, (_, i) => `volume-${i + 1}`),
    ...Array.from({ length: vmCount }, (_, i) => `vm-${i + 1}`),
    'configure-app',
    'health-check',
  ];
}
