import type { DashboardEvent, DashboardState } from '../../src/wire.js';

/**
 * A one-line description of a status change worth announcing to screen readers
 * (`aria-live`), or null for events that are not. `prev` is the state before the event.
 */
export function describeEvent(prev: DashboardState, event: DashboardEvent): string | null {
  switch (event.type) {
    case 'providers:reshape':
      return `Provider tree of ${event.reshape.node} reshaped: ${event.reshape.before.length} to ${event.reshape.after.length} providers.`;
    case 'queue:key': {
      const before = prev.queues.find((k) => k.key === event.key.key);
      if (before?.status === event.key.status) return null;
      return `Queue ${event.key.key} is ${event.key.status}.`;
    }
    case 'flow:update': {
      const before = prev.flows.find((f) => f.id === event.flow.id);
      if (before?.state === event.flow.state) return null;
      return `Flow ${event.flow.name} is ${event.flow.state}.`;
    }
    case 'flow:task': {
      const flow = prev.flows.find((f) => f.id === event.flowId);
      if (!flow || !event.flowState || event.flowState === flow.state) return null;
      return `Flow ${flow.name} is ${event.flowState}.`;
    }
    case 'plan:set':
      return event.plan
        ? `Destruction plan for ${event.plan.root}: ${event.plan.groups.length} groups.`
        : null;
    default:
      return null;
  }
}
