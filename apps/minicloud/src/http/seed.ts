/**
 * The first dashboard snapshot of a server: what the task log and the queue know from before
 * this process started (blocked keys, recent flows).
 */
import type { FlowView, TaskView } from '../wire.js';
import { DashboardHub } from '../../dashboard/serve.js';
import { FLOW_STATES, TASK_STATES } from '../cloud/events.js';
import type { Cloud } from '../cloud/index.js';

/**
 * The dashboard's event hub of a server, fed from `cloud.hub` (call `off` on close) and seeded
 * with the provider tree, the cache, and the queue keys and flows from before this process.
 */
export async function openDashboardHub(
  cloud: Cloud,
  maxClients: number,
): Promise<{ hub: DashboardHub; off: () => void }> {
  const hub = new DashboardHub({ initial: cloud.hub.state, maxClients });
  const off = cloud.hub.onAny((_type, event) => hub.publish(event));
  await cloud.providerTree().catch(() => []);
  cloud.publishCache();
  await seedQueueKeys(cloud, hub);
  await seedFlows(cloud, hub);
  return { hub, off };
}

/** A key the dashboard has seen, or a container's: idle rather than unknown. */
export async function knownKey(cloud: Cloud, hub: DashboardHub, key: string): Promise<boolean> {
  if (hub.state.queues.some((k) => k.key === key)) return true;
  return (await cloud.containers()).some((c) => c.name === key);
}

/** Keys that are not idle at startup (e.g. blocked before a restart), for the first snapshot. */
async function seedQueueKeys(cloud: Cloud, hub: DashboardHub): Promise<void> {
  const active = await cloud.queue.activeKeys().catch(() => []);
  for (const { key } of active) {
    if (hub.state.queues.some((k) => k.key === key)) continue;
    const state = await cloud.queueKey(key).catch(() => undefined);
    if (!state) continue;
    hub.publish({ type: 'queue:key', key: state });
  }
}

/**
 * Recent flows from the task log that this process has not seen (e.g. before a restart), rebuilt
 * from their history for the first snapshot, so the Flows view is not empty after a restart.
 */
async function seedFlows(cloud: Cloud, hub: DashboardHub, limit = 20): Promise<void> {
  const flows = await cloud.engine.flows({ limit }).catch(() => []);
  for (const f of flows.reverse()) {
    if (hub.state.flows.some((x) => x.id === f.flowId)) continue;
    const history = await cloud.engine.history(f.flowId).catch(() => []);
    const tasks = new Map<string, TaskView>();
    let failure: FlowView['failure'] = null;
    for (const e of history) {
      if (!e.task) continue;
      const prev = tasks.get(e.task);
      const state = TASK_STATES[e.state] ?? 'pending';
      const ended = state !== 'running' && state !== 'reverting' && state !== 'pending';
      tasks.set(e.task, {
        name: e.task,
        state,
        startedAt: prev?.startedAt ?? (state === 'pending' ? null : e.at),
        endedAt: ended ? e.at : null,
        attempts: e.attempt ?? prev?.attempts ?? 1,
        error: e.failure?.message ?? prev?.error ?? null,
      });
      if (e.state === 'FAILURE' && e.failure && !failure) {
        failure = { task: e.task, message: e.failure.message };
      }
    }
    const state = FLOW_STATES[f.state] ?? 'pending';
    hub.publish({
      type: 'flow:update',
      flow: {
        id: f.flowId,
        name: f.name,
        state,
        startedAt: f.createdAt,
        endedAt: ['succeeded', 'failed', 'reverted'].includes(state) ? f.updatedAt : null,
        tasks: [...tasks.values()],
        failure,
      },
    });
  }
}
