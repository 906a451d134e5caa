import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RiggingError, sleep } from '@rigging/core';
import { retryOnConflict, type ReshapeStore } from '@rigging/reshape';
import { linearFlow, task, times, unorderedFlow, type Flow } from '@rigging/tasks';
import { refKey, type PackageRef } from '@rigging/package-cache';
import type { Database } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';
import { gpuName } from './compute.js';

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
  const db = deps.database.db;
  const put = async (
    id: string,
    env: string,
    type: string,
    data: unknown,
    consumer: string | null = null,
  ) => {
    await db.deleteFrom('minicloud_resources').where('id', '=', id).execute();
    await db
      .insertInto('minicloud_resources')
      .values({ id, env, type, consumer, data: JSON.stringify(data), created_at: Date.now() })
      .execute();
  };
  const drop = (id: string) => db.deleteFrom('minicloud_resources').where('id', '=', id).execute();
  const stallOnce = async (ref: string, signal: AbortSignal) => {
    const seen = await db
      .selectFrom('minicloud_journal')
      .select('pid')
      .where('kind', '=', 'stall')
      .where('ref', '=', ref)
      .executeTakeFirst();
    if (seen) {
      await db
        .insertInto('minicloud_journal')
        .values({ kind: 'stall-passed', ref, pid: process.pid, at: Date.now() })
        .execute();
      return;
    }
    await db
      .insertInto('minicloud_journal')
      .values({ kind: 'stall', ref, pid: process.pid, at: Date.now() })
      .execute();
    await sleep(STALL_MS, { signal });
  };
  const failIf = (faults: DeployInputs['faults'], name: string) => {
    if (faults.failStep === name) {
      throw new RiggingError(
        'minicloud.step_failed',
        `${name} failed (deliberately, to show the rollback)`,
      );
    }
  };

  const network = task({
    name: 'create-network',
    requires: ['env', 'faults'],
    provides: 'networkId',
    async execute(ctx, inputs: AnyInputs) {
      const { env, faults } = inputs as DeployInputs;
      await sleep(inputs.faults.stepMs ?? STEP_MS, { signal: ctx.signal });
      failIf(faults, 'create-network');
      const id = `${env}/net`;
      await put(id, env, 'network', { cidr: '10.0.0.0/24' });
      return id;
    },
    async revert(_ctx, { result }) {
      if (result) await drop(result as string);
    },
  });

  const volumes = Array.from({ length: vmCount }, (_, i) =>
    task({
      name: `volume-${i + 1}`,
      requires: ['env', 'faults', 'networkId'],
      provides: `volume${i + 1}`,
      async execute(ctx, inputs: AnyInputs) {
        const { env, faults } = inputs as DeployInputs;
        await sleep(inputs.faults.stepMs ?? STEP_MS, { signal: ctx.signal });
        failIf(faults, `volume-${i + 1}`);
        const id = `${env}/vol-${i + 1}`;
        await put(id, env, 'volume', { sizeGb: 20 });
        return id;
      },
      async revert(_ctx, { result }) {
        if (result) await drop(result as string);
      },
    }),
  );

  const vms = Array.from({ length: vmCount }, (_, i) => {
    const name = `vm-${i + 1}`;
    return task({
      name,
      requires: ['env', 'faults', 'node', 'networkId', `volume${i + 1}`],
      provides: `vm${i + 1}`,
      retry: times(2, 50),
      async execute(ctx, inputs: AnyInputs) {
        const { env, faults, node } = inputs as DeployInputs;
        if (faults.stallOnce === name) await stallOnce(`${ctx.flowId}/${name}`, ctx.signal);
        await sleep(inputs.faults.stepMs ?? STEP_MS, { signal: ctx.signal });
        if (faults.vmFailOnce.includes(name) && ctx.attempt === 1) {
          throw new RiggingError(
            'minicloud.vm_boot_timeout',
            `${name}: hypervisor on ${node} timed out booting it`,
          );
        }
        failIf(faults, name);
        const root = await deps.nodeUuid();
        const consumer = consumerUuid(ctx.flowId, name);
        const chosen = await retryOnConflict(
          async () => {
            const gpus = (await deps.reshape.listProviders({ inTree: root })).filter((p) =>
              p.name.startsWith(gpuName(node, 0).slice(0, -1)),
            );
            for (const g of gpus) {
              const [inv, use] = await Promise.all([
                deps.reshape.getInventories(g.uuid),
                deps.reshape.getUsages(g.uuid),
              ]);
              const v = inv.inventories.VGPU;
              if (v && (v.total - v.reserved) * v.allocationRatio - (use.usages.VGPU ?? 0) >= 1)
                return g;
            }
            return undefined;
          },
          async (gpu) => {
            const allocations: Record<string, Record<string, number>> = {
              [root]: { ...VM_RESOURCES.root },
            };
            if (gpu) allocations[gpu.uuid] = { ...VM_RESOURCES.gpu };
            await deps.reshape.setAllocations(consumer, {
              projectId: 'minicloud',
              userId: env,
              allocations,
            });
            return { gpu, allocations };
          },
        );
        const id = `${env}/${name}`;
        const result: VmResult = {
          id,
          name,
          consumer,
          gpu: chosen.gpu?.name ?? 'none',
          allocations: chosen.allocations,
        };
        await put(
          id,
          env,
          'vm',
          { gpu: result.gpu, network: inputs.networkId, volume: inputs[`volume${i + 1}`] },
          consumer,
        );
        return result;
      },
      async revert(_ctx, { result }) {
        const vm = result as VmResult | null;
        if (!vm) return;
        try {
          await deps.reshape.deleteAllocations(vm.consumer);
        } catch (error) {
          if (!RiggingError.hasCode(error, 'reshape.consumer_not_found')) throw error;
        }
        await drop(vm.id);
      },
    });
  });

  const configure = task({
    name: 'configure-app',
    requires: ['env', 'faults', 'packagePath', 'packageRef', ...vms.map((_, i) => `vm${i + 1}`)],
    provides: 'appConfig',
    async execute(ctx, anyInputs: AnyInputs) {
      const inputs = anyInputs as DeployInputs;
      await sleep(inputs.faults.stepMs ?? STEP_MS, { signal: ctx.signal });
      failIf(inputs.faults, 'configure-app');
      const manifest = JSON.parse(
        await readFile(join(inputs.packagePath, 'manifest.json'), 'utf8'),
      ) as {
        name: string;
        port: number;
      };
      const id = `${inputs.env}/app-config`;
      await put(id, inputs.env, 'app-config', {
        app: manifest.name,
        port: manifest.port,
        package: refKey(inputs.packageRef),
      });
      return { id, app: manifest.name, port: manifest.port };
    },
    async revert(_ctx, { result }) {
      const r = result as { id: string } | null;
      if (r) await drop(r.id);
    },
  });

  const health = task({
    name: 'health-check',
    requires: ['env', 'faults', 'appConfig'],
    async execute(ctx, inputs: AnyInputs) {
      const { env, faults } = inputs as DeployInputs;
      await sleep(inputs.faults.stepMs ?? STEP_MS, { signal: ctx.signal });
      if (faults.failStep === 'health-check') {
        throw new RiggingError(
          'minicloud.health_check_failed',
          `${env}: the application answered HTTP 503 (deliberate failure)`,
        );
      }
      return 'healthy';
    },
  });

  return linearFlow(
    DEPLOY_FLOW,
    network,
    unorderedFlow('volumes', ...volumes),
    unorderedFlow('vms', ...vms),
    configure,
    health,
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
