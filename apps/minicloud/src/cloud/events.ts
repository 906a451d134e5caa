import { systemClock, TypedEmitter, type Clock } from '@rigging/core';
import {
  applyEvent,
  emptyState,
  type DashboardEvent,
  type DashboardEventType,
  type DashboardState,
  type FlowStatus,
  type FlowView,
  type QueueKeyState,
  type TaskStatus,
  type TaskView,
} from '../wire.js';

/**
 * The events of a {@link Cloud}'s hub: one per dashboard event type, each payload being the
 * whole dashboard event (`type` included), so `hub.onAny((_, e) => dashboardHub.publish(e))`
 * forwards everything.
 */
export type CloudEvents = { [K in DashboardEventType]: Extract<DashboardEvent, { type: K }> };

/**
 * The typed event hub of a cloud: re-emits what the packages emit in the dashboard's shape and
 * keeps the folded {@link DashboardState} (the same reducer the page uses), for snapshots.
 */
export class CloudHub extends TypedEmitter<CloudEvents> {
  #state: DashboardState = emptyState();
  readonly #flows = new Map<string, FlowView>();
  readonly #keys = new Map<string, QueueKeyState>();
  /** Ops this process's worker started lately (their `op:queued` may come after). */
  readonly #started = new Set<string>();
  readonly #clock: Clock;

  /** `clock`: the time of flows announced here, queue keys' updates and failures. */
  constructor(clock: Clock = systemClock) {
    super({ onListenerError: () => {} });
    this.#clock = clock;
  }

  /** The state after every event published so far (what a dashboard snapshot sends). */
  get state(): DashboardState {
    return this.#state;
  }

  /** Applies `event` to the state and emits it under its type. */
  publish(event: DashboardEvent): void {
    this.#state = applyEvent(this.#state, event);
    this.emit(event.type, event as never);
  }

  // ------------------------------------------------------------------ flows (tasks engine)

  /** @internal announces a flow with its task names, before it runs. */
  flowStarted(id: string, name: string, tasks: string[], owner?: string): void {
    const flow: FlowView = {
      id,
      name,
      state: 'pending',
      startedAt: this.#clock.now(),
      endedAt: null,
      tasks: tasks.map((t) => ({ name: t, state: 'pending', startedAt: null, endedAt: null })),
      failure: null,
      ...(owner ? { owner } : {}),
    };
    this.#flows.set(id, flow);
    if (this.#flows.size > 50) this.#flows.delete(this.#flows.keys().next().value!);
    this.publish({ type: 'flow:update', flow });
  }

  /** @internal one `task:state` event of the engine. */
  taskState(e: {
    flowId: string;
    flow: string;
    task: string;
    state: string;
    attempt: number;
    at: number;
    failure?: { message: string } | undefined;
  }): void {
    const flow = this.#flow(e.flowId, e.flow);
    const prev = flow.tasks.find((t) => t.name === e.task);
    const state = TASK_STATES[e.state] ?? 'running';
    const task: TaskView = {
      name: e.task,
      state,
      startedAt: e.state === 'RUNNING' || !prev?.startedAt ? e.at : prev.startedAt,
      endedAt: state === 'running' || state === 'reverting' ? null : e.at,
      attempts: e.attempt,
      error: e.failure ? e.failure.message : (prev?.error ?? null),
    };
    if (e.state === 'RUNNING' && prev?.startedAt) task.startedAt = prev.startedAt;
    flow.tasks = prev
      ? flow.tasks.map((t) => (t.name === e.task ? task : t))
      : [...flow.tasks, task];
    let flowState: FlowStatus | undefined;
    if (e.state === 'FAILURE' && e.failure && !flow.failure) {
      flow.failure = { task: e.task, message: e.failure.message };
    }
    if (e.state === 'REVERTING' && flow.state !== 'reverting') flowState = flow.state = 'reverting';
    this.publish({
      type: 'flow:task',
      flowId: e.flowId,
      task,
      ...(flowState ? { flowState } : {}),
    });
  }

  /** @internal one `flow:state` event of the engine. */
  flowState(e: {
    flowId: string;
    flow: string;
    state: string;
    at: number;
    failure?: { task: string | null; message: string } | undefined;
  }): void {
    const flow = this.#flow(e.flowId, e.flow);
    flow.state = FLOW_STATES[e.state] ?? flow.state;
    if (e.state === 'RUNNING' && flow.startedAt === null) flow.startedAt = e.at;
    if (['SUCCESS', 'REVERTED', 'REVERT_FAILURE', 'CANCELLED', 'FAILURE'].includes(e.state)) {
      flow.endedAt = e.at;
    }
    if (e.failure && !flow.failure) {
      flow.failure = { task: e.failure.task ?? flow.name, message: e.failure.message };
    }
    this.publish({ type: 'flow:update', flow: { ...flow, tasks: [...flow.tasks] } });
  }

  /** A known flow, or one announced by its first event (e.g. resumed from another process). */
  #flow(id: string, name: string): FlowView {
    const known = this.#flows.get(id);
    if (known) return known;
    this.flowStarted(id, name, []);
    return this.#flows.get(id)!;
  }

  // ------------------------------------------------------------------ queue keys

  /**
   * @internal a key as the queue's store sees it (`inspect`), for work other processes do:
   * published only when it differs from what this hub shows.
   */
  queueSnapshot(next: QueueKeyState): void {
    const prev = this.#keys.get(next.key);
    const same =
      prev &&
      prev.status === next.status &&
      prev.running?.id === next.running?.id &&
      prev.pending.map((o) => o.id).join() === next.pending.map((o) => o.id).join() &&
      (prev.lastFailure?.opId ?? null) === (next.lastFailure?.opId ?? null);
    if (same) return;
    const key = { ...next, updatedAt: this.#clock.now() };
    this.#keys.set(next.key, key);
    this.publish({ type: 'queue:key', key: { ...key, pending: [...key.pending] } });
  }

  /** Keys this hub shows as not idle. */
  get busyKeys(): string[] {
    return [...this.#keys.values()].filter((k) => k.status !== 'idle').map((k) => k.key);
  }

  /**
   * @internal updates one key from a queue event and publishes it. The key's status follows from
   * the events themselves (an op queued, started, finished; the key blocked, resumed, discarded),
   * so the queue need not read it from its store after every enqueue and completion; a
   * `key:status` event, when forwarded, sets it as the store saw it.
   */
  queueEvent(event: string, p: Record<string, unknown>): void {
    const keyName = p.key as string;
    const key: QueueKeyState = this.#keys.get(keyName) ?? {
      key: keyName,
      status: 'idle',
      running: null,
      pending: [],
      lastFailure: null,
    };
    const id = p.id as string;
    const type = p.type as string;
    switch (event) {
      case 'op:queued':
        // Nothing added by a repeat; and a worker of this process may start the op before its
        // enqueue returns here.
        if (p.deduplicated || this.#started.has(id)) return;
        key.pending = [...key.pending, { id, type, enqueuedAt: this.#clock.now() }];
        // `held`: the store has the key blocked (by this process or another), the op waits.
        if (p.held) key.status = 'blocked';
        else if (key.status === 'idle' || key.status === 'blocked') key.status = 'queued';
        break;
      case 'op:started':
        this.#started.add(id);
        if (this.#started.size > 1000) this.#started.delete(this.#started.values().next().value!);
        key.pending = key.pending.filter((o) => o.id !== id);
        key.running = { id, type };
        key.status = `${type}-in-progress`;
        break;
      case 'op:succeeded':
        if (key.running?.id === id) key.running = null;
        settled(key);
        break;
      case 'op:released':
        // Back in the store for a worker to claim again.
        if (key.running?.id === id) key.running = null;
        if (key.status !== 'blocked') key.status = 'queued';
        break;
      case 'op:failed':
        if (key.running?.id === id) key.running = null;
        key.lastFailure = {
          opId: id,
          type,
          message: (p.error as { message?: string } | undefined)?.message ?? 'failed',
          at: this.#clock.now(),
        };
        settled(key);
        break;
      case 'op:cancelled':
        key.pending = key.pending.filter((o) => o.id !== id);
        settled(key);
        break;
      case 'key:blocked':
        key.status = 'blocked';
        break;
      case 'key:resumed':
        key.status = 'idle';
        settled(key);
        break;
      case 'key:status':
        key.status = p.status as string;
        if (p.status === 'idle') key.running = null;
        break;
      case 'key:discarded':
        key.pending = [];
        key.status = 'idle';
        settled(key);
        break;
      default:
        return;
    }
    key.updatedAt = this.#clock.now();
    this.#keys.set(keyName, key);
    this.publish({ type: 'queue:key', key: { ...key, pending: [...key.pending] } });
  }
}

/**
 * A key's status once an op of it left (finished, cancelled) or it was unblocked: blocked stays
 * blocked (until resumed or discarded), else the running op's, queued while ops wait, or idle.
 */
function settled(key: QueueKeyState): void {
  if (key.status === 'blocked') return;
  if (key.running) key.status = `${key.running.type}-in-progress`;
  else key.status = key.pending.length > 0 ? 'queued' : 'idle';
}

/** Task log states → the dashboard's task statuses. */
export const TASK_STATES: Record<string, TaskStatus> = {
  PENDING: 'pending',
  RUNNING: 'running',
  RETRYING: 'running',
  SUCCESS: 'succeeded',
  FAILURE: 'failed',
  REVERTING: 'reverting',
  REVERTED: 'reverted',
  REVERT_FAILURE: 'failed',
  CANCELLED: 'failed',
  SUSPENDED: 'pending',
};

/** Task log states of a flow → the dashboard's flow statuses. */
export const FLOW_STATES: Record<string, FlowStatus> = {
  PENDING: 'pending',
  RUNNING: 'running',
  SUCCESS: 'succeeded',
  FAILURE: 'failed',
  REVERTING: 'reverting',
  REVERTED: 'reverted',
  REVERT_FAILURE: 'failed',
  CANCELLED: 'reverted',
  SUSPENDED: 'pending',
};
