/**
 * The scripted story the fixture server replays: reshape → package download → a flow that
 * succeeds after a retry → a flow that fails and reverts → a queue key turning blocked →
 * the teardown plan progressing. Mirrors `minicloud demo` with made-up data.
 */
import type {
  CacheDownload,
  DashboardEvent,
  DashboardState,
  FlowView,
  PlanView,
  ProviderNode,
  QueueKeyState,
  TaskView,
} from '../../src/wire.js';

/** A step: wait `ticks` × the server's step time, then publish `event`. */
export interface Step {
  ticks: number;
  event: DashboardEvent;
}

const MiB = 1024 * 1024;
const ROOT = '6f1c2a4e-0b7d-4f8e-9a51-3d2c1b0a9e01';
const gpuUuid = (i: number) => `a0c1e2f3-${i}b2c-4d5e-8f90-1a2b3c4d5e6${i}`;

export function providersBefore(): ProviderNode[] {
  return [
    {
      uuid: ROOT,
      name: 'node-1',
      parent: null,
      generation: 7,
      inventories: {
        VCPU: { total: 32, reserved: 2, allocationRatio: 4, used: 24 },
        MEMORY_MB: { total: 131072, reserved: 4096, allocationRatio: 1, used: 49152 },
        VGPU: { total: 16, reserved: 0, allocationRatio: 1, used: 6 },
      },
    },
  ];
}

export function providersAfter(): ProviderNode[] {
  const used = [2, 2, 1, 1];
  return [
    {
      uuid: ROOT,
      name: 'node-1',
      parent: null,
      generation: 8,
      inventories: {
        VCPU: { total: 32, reserved: 2, allocationRatio: 4, used: 24 },
        MEMORY_MB: { total: 131072, reserved: 4096, allocationRatio: 1, used: 49152 },
      },
    },
    ...used.map((u, i): ProviderNode => ({
      uuid: gpuUuid(i),
      name: `node-1_pci_0000_8${i}_00_0`,
      parent: ROOT,
      generation: 1,
      inventories: { VGPU: { total: 4, reserved: 0, allocationRatio: 1, used: u } },
    })),
  ];
}

/** The state the server starts with (before the reshape). */
export function initialState(now: number): DashboardState {
  return {
    providers: { nodes: providersBefore(), lastReshape: null },
    queues: [],
    flows: [],
    plan: null,
    cache: {
      capBytes: 64 * MiB,
      bytesUsed: 9 * MiB,
      hits: 0,
      misses: 0,
      entries: [
        {
          fqn: 'io.minicloud.apps.Base',
          version: '1.0.0',
          id: 'pkg-3b9f0c1d2e4a',
          bytes: 9 * MiB,
          inUse: 0,
          lastUsedAt: now - 3_600_000,
        },
      ],
      downloads: [],
      locks: [],
    },
  };
}

const TASKS = ['network', 'volumes', 'vm-1', 'vm-2', 'vm-3', 'app-config'];

function flowSteps(
  t0: number,
  flowId: string,
  name: string,
  mode: 'retry-then-succeed' | 'fail-and-revert',
): Step[] {
  const steps: Step[] = [];
  const tasks: TaskView[] = TASKS.map((n) => ({
    name: n,
    state: 'pending',
    startedAt: null,
    endedAt: null,
  }));
  let clock = t0;
  const tick = () => (clock += 700);
  const flow: FlowView = {
    id: flowId,
    name,
    state: 'running',
    startedAt: clock,
    endedAt: null,
    tasks,
    failure: null,
    owner: 'worker-1',
  };
  steps.push({ ticks: 1, event: { type: 'flow:update', flow } });
  const taskEvent = (task: TaskView, flowState?: FlowView['state']): Step => ({
    ticks: 1,
    event: {
      type: 'flow:task',
      flowId,
      task,
      ...(flowState ? { flowState } : {}),
    },
  });
  const done: TaskView[] = [];
  for (const n of TASKS) {
    const start = tick();
    const failsHere = mode === 'fail-and-revert' && n === 'app-config';
    steps.push(
      taskEvent({ name: n, state: 'running', startedAt: start, endedAt: null, attempts: 1 }),
    );
    if (mode === 'retry-then-succeed' && n === 'vm-2') {
      steps.push(
        taskEvent({
          name: n,
          state: 'running',
          startedAt: start,
          endedAt: null,
          attempts: 2,
          error: 'attempt 1: hypervisor timeout (retrying)',
        }),
      );
    }
    if (failsHere) {
      const message = 'deliberate failure: config template missing';
      steps.push(
        taskEvent(
          {
            name: n,
            state: 'failed',
            startedAt: start,
            endedAt: tick(),
            attempts: 1,
            error: message,
          },
          'reverting',
        ),
      );
      steps.push({
        ticks: 0,
        event: {
          type: 'flow:update',
          flow: {
            ...flow,
            state: 'reverting',
            tasks: [
              ...done,
              {
                name: n,
                state: 'failed',
                startedAt: start,
                endedAt: clock,
                attempts: 1,
                error: message,
              },
            ],
            failure: { task: n, message },
          },
        },
      });
      for (const t of done.slice().reverse()) {
        steps.push(taskEvent({ ...t, state: 'reverting' }));
        steps.push(taskEvent({ ...t, state: 'reverted', endedAt: tick() }));
      }
      steps.push({
        ticks: 1,
        event: {
          type: 'flow:update',
          flow: {
            ...flow,
            state: 'reverted',
            endedAt: tick(),
            tasks: [
              ...done.map((t) => ({ ...t, state: 'reverted' as const })),
              {
                name: n,
                state: 'failed',
                startedAt: start,
                endedAt: clock,
                attempts: 1,
                error: message,
              },
            ],
            failure: { task: n, message },
          },
        },
      });
      return steps;
    }
    const finished: TaskView = {
      name: n,
      state: 'succeeded',
      startedAt: start,
      endedAt: tick(),
      attempts: mode === 'retry-then-succeed' && n === 'vm-2' ? 2 : 1,
    };
    done.push(finished);
    steps.push(taskEvent(finished));
  }
  steps.push({
    ticks: 1,
    event: {
      type: 'flow:update',
      flow: { ...flow, state: 'succeeded', endedAt: tick(), tasks: done },
    },
  });
  return steps;
}

function queueKey(key: string, patch: Partial<QueueKeyState>): QueueKeyState {
  return { key, status: 'idle', running: null, pending: [], lastFailure: null, ...patch };
}

const op = (key: string, n: number, type: string) => ({ id: `${key}-op${n}`, type });

export function teardownPlan(now: number): PlanView {
  return {
    id: 'plan-env-1',
    root: 'env-1',
    createdAt: now,
    groups: [['vm-1', 'vm-2', 'vm-3'], ['vol-1', 'vol-2', 'sg-web', 'sg-db'], ['net-1']],
    objects: [
      { id: 'vm-1', type: 'vm', state: 'pending' },
      { id: 'vm-2', type: 'vm', state: 'pending' },
      { id: 'vm-3', type: 'vm', state: 'pending' },
      { id: 'vol-1', type: 'volume', state: 'pending' },
      { id: 'vol-2', type: 'volume', state: 'pending' },
      { id: 'sg-web', type: 'secgroup', state: 'pending' },
      { id: 'sg-db', type: 'secgroup', state: 'pending' },
      { id: 'net-1', type: 'network', state: 'pending' },
    ],
    edges: [
      { from: 'net-1', to: 'vm-1', kind: 'depends', reason: 'vm-1 has a port on net-1' },
      { from: 'net-1', to: 'vm-2', kind: 'depends', reason: 'vm-2 has a port on net-1' },
      { from: 'net-1', to: 'vm-3', kind: 'depends', reason: 'vm-3 has a port on net-1' },
      { from: 'vm-1', to: 'vol-1', kind: 'owns', reason: 'vol-1 was created for vm-1' },
      { from: 'vm-2', to: 'vol-2', kind: 'owns', reason: 'vol-2 was created for vm-2' },
      { from: 'net-1', to: 'sg-web', kind: 'owns', reason: 'security group of net-1' },
      { from: 'net-1', to: 'sg-db', kind: 'owns', reason: 'security group of net-1' },
      { from: 'sg-web', to: 'sg-db', kind: 'depends', reason: 'sg-web rule allows sg-db' },
      { from: 'sg-db', to: 'sg-web', kind: 'depends', reason: 'sg-db rule allows sg-web' },
    ],
    cycles: [['sg-web', 'sg-db']],
  };
}

/** The startup reshape of node-1. */
function reshapeSteps(now: number): Step[] {
  const steps: Step[] = [];
  steps.push({
    ticks: 2,
    event: {
      type: 'providers:reshape',
      reshape: {
        at: now,
        node: 'node-1',
        reason: 'ReshapeNeeded: node-1 reports 4 physical GPUs; VGPU moves to one child per GPU',
        before: providersBefore(),
        after: providersAfter(),
        allocationsMoved: 6,
      },
    },
  });
  return steps;
}

/** A package download (a miss), then the package in use. */
function downloadSteps(now: number): Step[] {
  const steps: Step[] = [];
  const dl: CacheDownload = {
    id: 'dl-1',
    fqn: 'io.minicloud.apps.Web',
    version: '2.1.0',
    bytesDone: 0,
    bytesTotal: 24 * MiB,
  };
  const lock = {
    key: 'package:io.minicloud.apps.Web@2.1.0',
    pid: 4242,
    mode: 'exclusive' as const,
    since: now,
  };
  steps.push({ ticks: 1, event: { type: 'cache:update', cache: { misses: 1, locks: [lock] } } });
  steps.push({ ticks: 0, event: { type: 'cache:download', download: dl } });
  for (const done of [6, 12, 18, 24]) {
    steps.push({
      ticks: 1,
      event: { type: 'cache:download', download: { ...dl, bytesDone: done * MiB } },
    });
  }
  steps.push({ ticks: 1, event: { type: 'cache:download-done', id: 'dl-1' } });
  steps.push({
    ticks: 0,
    event: {
      type: 'cache:update',
      cache: {
        bytesUsed: 33 * MiB,
        entries: [
          ...initialState(now).cache.entries,
          {
            fqn: 'io.minicloud.apps.Web',
            version: '2.1.0',
            id: 'pkg-9d8c7b6a5f4e',
            bytes: 24 * MiB,
            inUse: 1,
            lastUsedAt: now,
          },
        ],
        locks: [{ ...lock, mode: 'shared', pid: 4243, since: now + 1000 }],
      },
    },
  });
  return steps;
}

/** Container operations; ctr-2 fails and becomes blocked. */
function containerSteps(now: number): Step[] {
  const steps: Step[] = [];
  steps.push(
    {
      ticks: 1,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-1', {
          status: 'create-in-progress',
          running: op('ctr-1', 1, 'create'),
          pending: [op('ctr-1', 2, 'start')],
        }),
      },
    },
    {
      ticks: 0,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-2', {
          status: 'create-in-progress',
          running: op('ctr-2', 1, 'create'),
          pending: [op('ctr-2', 2, 'start'), op('ctr-2', 3, 'stop')],
        }),
      },
    },
    {
      ticks: 0,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-3', {
          status: 'create-in-progress',
          running: op('ctr-3', 1, 'create'),
          pending: [op('ctr-3', 2, 'start'), op('ctr-3', 3, 'stop'), op('ctr-3', 4, 'delete')],
        }),
      },
    },
    {
      ticks: 2,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-1', { status: 'start-in-progress', running: op('ctr-1', 2, 'start') }),
      },
    },
    {
      ticks: 1,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-2', {
          status: 'blocked',
          pending: [op('ctr-2', 2, 'start'), op('ctr-2', 3, 'stop')],
          lastFailure: {
            opId: 'ctr-2-op1',
            type: 'create',
            message: 'image io.minicloud/busybox not found',
            at: now + 20_000,
          },
        }),
      },
    },
    {
      ticks: 0,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-3', {
          status: 'start-in-progress',
          running: op('ctr-3', 2, 'start'),
          pending: [op('ctr-3', 3, 'stop'), op('ctr-3', 4, 'delete')],
        }),
      },
    },
    { ticks: 1, event: { type: 'queue:key', key: queueKey('ctr-1', {}) } },
    {
      ticks: 0,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-3', {
          status: 'stop-in-progress',
          running: op('ctr-3', 3, 'stop'),
          pending: [op('ctr-3', 4, 'delete')],
        }),
      },
    },
    {
      ticks: 1,
      event: {
        type: 'queue:key',
        key: queueKey('ctr-3', { status: 'delete-in-progress', running: op('ctr-3', 4, 'delete') }),
      },
    },
    { ticks: 1, event: { type: 'queue:key', key: queueKey('ctr-3', {}) } },
  );
  return steps;
}

/** The teardown of env-1: its plan progressing, then allocations and the package released. */
function teardownSteps(now: number): Step[] {
  const steps: Step[] = [];
  const plan = teardownPlan(now + 30_000);
  steps.push({ ticks: 2, event: { type: 'plan:set', plan } });
  for (const group of plan.groups) {
    steps.push({
      ticks: 2,
      event: { type: 'plan:object', planId: plan.id, id: group[0]!, state: 'destroying' },
    });
    for (const id of group.slice(1)) {
      steps.push({
        ticks: 0,
        event: { type: 'plan:object', planId: plan.id, id, state: 'destroying' },
      });
    }
    for (const id of group) {
      steps.push({
        ticks: 1,
        event: { type: 'plan:object', planId: plan.id, id, state: 'destroyed' },
      });
    }
  }
  // Allocations released: the GPU children are free again.
  steps.push({
    ticks: 1,
    event: {
      type: 'providers:tree',
      nodes: providersAfter().map((n) =>
        n.parent === null
          ? n
          : { ...n, inventories: { VGPU: { ...n.inventories.VGPU!, used: 0 } } },
      ),
    },
  });
  steps.push({
    ticks: 0,
    event: {
      type: 'cache:update',
      cache: {
        locks: [],
        entries: [
          ...initialState(now).cache.entries,
          {
            fqn: 'io.minicloud.apps.Web',
            version: '2.1.0',
            id: 'pkg-9d8c7b6a5f4e',
            bytes: 24 * MiB,
            inUse: 0,
            lastUsedAt: now + 40_000,
          },
        ],
      },
    },
  });
  return steps;
}

/** The whole scripted story, timestamps relative to `now`. */
export function scenario(now: number): Step[] {
  return [
    ...reshapeSteps(now),
    ...downloadSteps(now),
    // Flows: one succeeds after a retry, one fails and reverts.
    ...flowSteps(now, 'flow-1', 'deploy env-1', 'retry-then-succeed'),
    { ticks: 0, event: { type: 'cache:update', cache: { hits: 1 } } },
    ...flowSteps(now + 10_000, 'flow-2', 'deploy env-2', 'fail-and-revert'),
    ...containerSteps(now),
    ...teardownSteps(now),
  ];
}

/** Steps that drain a blocked key after `resume`: its pending ops run in order, then idle. */
export function resumeSteps(key: QueueKeyState): Step[] {
  const steps: Step[] = [];
  const pending = key.pending.slice();
  while (pending.length > 0) {
    const running = pending.shift()!;
    steps.push({
      ticks: 1,
      event: {
        type: 'queue:key',
        key: { ...key, status: `${running.type}-in-progress`, running, pending: pending.slice() },
      },
    });
  }
  steps.push({
    ticks: 1,
    event: { type: 'queue:key', key: { ...key, status: 'idle', running: null, pending: [] } },
  });
  return steps;
}
