/**
 * The wire contract between the server and the dashboard: the state `GET /api/events` streams,
 * its events, and the reducer that folds them. `minicloud serve` and the page both import this
 * module (the server to type, fold and format its events, the page to apply them), so the two
 * cannot drift apart.
 *
 * Pure types and pure functions (no DOM, no Node APIs). The shapes are views for display: they
 * are named `…View` where a package exports a type of the same idea (`@rigging/tasks`'
 * `TaskState`, `@rigging/destroy-graph`'s `DestructionPlan`, `@rigging/reshape`'s `Inventory`),
 * so that a name never means two shapes in one codebase.
 *
 * Wire format: server-sent events. Every message is
 *
 *     event: <DashboardEvent['type']>
 *     data: <JSON of the whole DashboardEvent, `type` included>
 *
 * The first message on every connection is a `snapshot`; everything after it is incremental.
 * After a reconnect the server sends a fresh `snapshot`, which replaces the page's state.
 * Times are epoch milliseconds; sizes are bytes.
 */

// ---------------------------------------------------------------------------------------------
// Provider tree (placement / reshape)

/** One resource class's inventory on one provider (Placement semantics). */
export interface InventoryView {
  total: number;
  reserved: number;
  /** Capacity = (total - reserved) * allocationRatio. */
  allocationRatio: number;
  /** Sum of allocations against this provider and class. */
  used: number;
}

/** One resource provider. Roots have `parent: null`. */
export interface ProviderNode {
  uuid: string;
  name: string;
  parent: string | null;
  generation?: number;
  /** Keyed by resource class, e.g. `VGPU`, `VCPU`, `MEMORY_MB`. */
  inventories: Record<string, InventoryView>;
}

/** The last reshape: the whole tree before and after it. */
export interface ReshapeRecord {
  at: number;
  /** Compute node that reshaped, e.g. `node-1`. */
  node: string;
  reason?: string;
  before: ProviderNode[];
  after: ProviderNode[];
  /** Number of allocations moved to new providers. */
  allocationsMoved?: number;
}

export interface ProvidersState {
  nodes: ProviderNode[];
  lastReshape: ReshapeRecord | null;
}

// ---------------------------------------------------------------------------------------------
// Async queues

/** Known statuses; any `<op>-in-progress` string is also allowed. */
export type QueueStatus = 'idle' | 'blocked' | `${string}-in-progress` | (string & {});

export interface QueueOp {
  id: string;
  /** Operation type, e.g. `create`, `start`, `stop`, `delete`. */
  type: string;
  enqueuedAt?: number;
}

export interface QueueFailure {
  opId: string;
  type: string;
  message: string;
  at: number;
}

/** One queue key (one container). */
export interface QueueKeyState {
  key: string;
  status: QueueStatus;
  /** The op running now, if any. */
  running: QueueOp | null;
  /** Pending ops in the order they will run. */
  pending: QueueOp[];
  lastFailure: QueueFailure | null;
  updatedAt?: number;
}

// ---------------------------------------------------------------------------------------------
// Task flows

export type TaskStatus = 'pending' | 'running' | 'succeeded' | 'failed' | 'reverting' | 'reverted';
export type FlowStatus = 'pending' | 'running' | 'succeeded' | 'failed' | 'reverting' | 'reverted';

export interface TaskView {
  name: string;
  state: TaskStatus;
  startedAt: number | null;
  endedAt: number | null;
  /** Attempts so far (retries included). */
  attempts?: number;
  /** Error message of the last failed attempt. */
  error?: string | null;
}

export interface FlowFailure {
  /** Task whose failure caused the rollback. */
  task: string;
  message: string;
}

export interface FlowView {
  id: string;
  name: string;
  state: FlowStatus;
  startedAt: number | null;
  endedAt: number | null;
  /** Tasks in flow order. */
  tasks: TaskView[];
  failure: FlowFailure | null;
  /** Worker/owner running it, if known. */
  owner?: string;
}

// ---------------------------------------------------------------------------------------------
// Destruction plan

export type PlanObjectStatus = 'pending' | 'destroying' | 'destroyed' | 'failed' | 'skipped';

export interface PlanObjectView {
  id: string;
  /** Object type, e.g. `vm`, `network`, `volume`. */
  type: string;
  name?: string;
  state: PlanObjectStatus;
}

/**
 * `owns`: `from` owns `to`. `depends`: `from` has a destruction dependency on `to`, so `from`
 * is destroyed only after `to` (the network depends on its VMs).
 */
export interface PlanEdgeView {
  from: string;
  to: string;
  kind: 'owns' | 'depends';
  reason: string;
}

export interface PlanView {
  id: string;
  /** What was torn down, e.g. `env-1`. */
  root: string;
  createdAt: number;
  /** Object ids, group by group, in destruction order (group 0 first). */
  groups: string[][];
  objects: PlanObjectView[];
  edges: PlanEdgeView[];
  /** Cycles found (and broken) while planning, each a list of object ids. */
  cycles: string[][];
}

// ---------------------------------------------------------------------------------------------
// Package cache

export interface CacheEntry {
  fqn: string;
  version: string;
  id: string;
  bytes: number;
  /** Number of current users (deployments holding it). 0 = unused, evictable. */
  inUse: number;
  lastUsedAt?: number;
}

export interface CacheDownload {
  id: string;
  fqn: string;
  version: string;
  bytesDone: number;
  /** Unknown until the response says. */
  bytesTotal: number | null;
}

export interface CacheLockHolder {
  /** The lock key, e.g. `package:io.murano.apps.Web:1.0.0`. */
  key: string;
  pid: number | null;
  mode: 'shared' | 'exclusive';
  /** Epoch ms when acquired. */
  since: number;
  owner?: string;
}

export interface PackageCacheState {
  capBytes: number;
  bytesUsed: number;
  hits: number;
  misses: number;
  entries: CacheEntry[];
  downloads: CacheDownload[];
  locks: CacheLockHolder[];
}

// ---------------------------------------------------------------------------------------------
// Whole state and events

export interface DashboardState {
  providers: ProvidersState;
  queues: QueueKeyState[];
  /** Running and recent flows, newest first. */
  flows: FlowView[];
  /** The plan of the last teardown. */
  plan: PlanView | null;
  cache: PackageCacheState;
}

export type DashboardEvent =
  /** Full state; always first on a connection. */
  | { type: 'snapshot'; state: DashboardState }
  /** Replace the current provider tree. */
  | { type: 'providers:tree'; nodes: ProviderNode[] }
  /** A reshape happened: record it and set the tree to `reshape.after`. */
  | { type: 'providers:reshape'; reshape: ReshapeRecord }
  /** Insert or replace one queue key. */
  | { type: 'queue:key'; key: QueueKeyState }
  /** A key is gone (drained and forgotten). */
  | { type: 'queue:removed'; key: string }
  /** Insert or replace a whole flow (moved to the front when new). */
  | { type: 'flow:update'; flow: FlowView }
  /** Insert or replace one task of a known flow; `flowState` updates the flow's state too. */
  | {
      type: 'flow:task';
      flowId: string;
      task: TaskView;
      flowState?: FlowStatus;
    }
  /** A new teardown plan (or null to clear). */
  | { type: 'plan:set'; plan: PlanView | null }
  /** One object of the current plan changed state. */
  | { type: 'plan:object'; planId: string; id: string; state: PlanObjectStatus }
  /** Shallow-merge counters/lists into the cache state. */
  | { type: 'cache:update'; cache: Partial<PackageCacheState> }
  /** Insert or replace a download in progress. */
  | { type: 'cache:download'; download: CacheDownload }
  /** A download finished or failed; drop it from the list. */
  | { type: 'cache:download-done'; id: string };

export type DashboardEventType = DashboardEvent['type'];

/** Every event name, for `EventSource.addEventListener`. */
export const EVENT_TYPES: readonly DashboardEventType[] = [
  'snapshot',
  'providers:tree',
  'providers:reshape',
  'queue:key',
  'queue:removed',
  'flow:update',
  'flow:task',
  'plan:set',
  'plan:object',
  'cache:update',
  'cache:download',
  'cache:download-done',
];

/** Body of every non-2xx JSON response of the actions endpoints. */
export interface ApiError {
  error: { code: string; message: string };
}

/** Paths of the actions (POST, no body; 200 `{ ok: true, key }` or an {@link ApiError}). */
export const actionPath = (key: string, action: 'resume' | 'discard'): string =>
  `/api/queues/${encodeURIComponent(key)}/${action}`;

/** The empty state before the first snapshot. */
export function emptyState(): DashboardState {
  return {
    providers: { nodes: [], lastReshape: null },
    queues: [],
    flows: [],
    plan: null,
    cache: {
      capBytes: 0,
      bytesUsed: 0,
      hits: 0,
      misses: 0,
      entries: [],
      downloads: [],
      locks: [],
    },
  };
}

/** The state keeps at most this many flows (newest first); older ones drop off. */
export const MAX_FLOWS = 50;
/** Idle queue keys beyond this many are forgotten, least recently updated first. */
export const MAX_IDLE_KEYS = 100;

/** Drops the least recently updated idle keys beyond {@link MAX_IDLE_KEYS}; others stay. */
function capKeys(keys: QueueKeyState[]): QueueKeyState[] {
  const idle = keys.filter((k) => k.status === 'idle');
  if (idle.length <= MAX_IDLE_KEYS) return keys;
  const drop = new Set(
    idle
      .slice()
      .sort((a, b) => (a.updatedAt ?? 0) - (b.updatedAt ?? 0))
      .slice(0, idle.length - MAX_IDLE_KEYS),
  );
  return keys.filter((k) => !drop.has(k));
}

function upsert<T>(list: readonly T[], item: T, same: (a: T) => boolean, front = false): T[] {
  const i = list.findIndex(same);
  if (i === -1) return front ? [item, ...list] : [...list, item];
  const copy = list.slice();
  copy[i] = item;
  return copy;
}

/** Apply one event. Pure: returns a new state, never mutates `state`. Unknown events are ignored. */
export function applyEvent(state: DashboardState, event: DashboardEvent): DashboardState {
  switch (event.type) {
    case 'snapshot':
      return event.state;
    case 'providers:tree':
      return { ...state, providers: { ...state.providers, nodes: event.nodes } };
    case 'providers:reshape':
      return { ...state, providers: { nodes: event.reshape.after, lastReshape: event.reshape } };
    case 'queue:key':
      return {
        ...state,
        queues: capKeys(upsert(state.queues, event.key, (k) => k.key === event.key.key)),
      };
    case 'queue:removed':
      return { ...state, queues: state.queues.filter((k) => k.key !== event.key) };
    case 'flow:update':
      return {
        ...state,
        flows: upsert(state.flows, event.flow, (f) => f.id === event.flow.id, true).slice(
          0,
          MAX_FLOWS,
        ),
      };
    case 'flow:task': {
      const flow = state.flows.find((f) => f.id === event.flowId);
      if (!flow) return state;
      const next: FlowView = {
        ...flow,
        state: event.flowState ?? flow.state,
        tasks: upsert(flow.tasks, event.task, (t) => t.name === event.task.name),
      };
      return { ...state, flows: state.flows.map((f) => (f === flow ? next : f)) };
    }
    case 'plan:set':
      return { ...state, plan: event.plan };
    case 'plan:object': {
      const plan = state.plan;
      if (!plan || plan.id !== event.planId) return state;
      return {
        ...state,
        plan: {
          ...plan,
          objects: plan.objects.map((o) => (o.id === event.id ? { ...o, state: event.state } : o)),
        },
      };
    }
    case 'cache:update':
      return { ...state, cache: { ...state.cache, ...event.cache } };
    case 'cache:download':
      return {
        ...state,
        cache: {
          ...state.cache,
          downloads: upsert(
            state.cache.downloads,
            event.download,
            (d) => d.id === event.download.id,
          ),
        },
      };
    case 'cache:download-done':
      return {
        ...state,
        cache: {
          ...state.cache,
          downloads: state.cache.downloads.filter((d) => d.id !== event.id),
        },
      };
    default:
      return state;
  }
}

/** Format one event as an SSE message (what the server writes to the response). */
export function formatSse(event: DashboardEvent): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}
