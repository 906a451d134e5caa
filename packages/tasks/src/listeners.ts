import type { Engine, FlowStateEvent, TaskStateEvent } from './engine.js';

/** Durations measured by {@link timingListener}, in milliseconds (engine clock). */
export interface TaskTiming {
  /** The flow run's id. */
  flowId: string;
  /** The task's name. */
  task: string;
  /** RUNNING → SUCCESS/FAILURE (the last attempt; retries included from the first RUNNING). */
  executeMs?: number;
  /** REVERTING → REVERTED/REVERT_FAILURE. */
  revertMs?: number;
  /** The attempt number of the last RUNNING seen (0 before the task ran). */
  attempts: number;
}

/** A listener that measures how long each task took to execute and to revert. */
export interface TimingListener extends Disposable {
  /** Timings of a flow's tasks (in the order they started). */
  timings(flowId: string): TaskTiming[];
  /** Forgets a flow's timings. */
  clear(flowId?: string): void;
  /** Unsubscribes (idempotent). */
  off(): void;
}

/** Measures task execute/revert durations from the engine's events. */
export function timingListener(engine: Engine): TimingListener {
  const flows = new Map<
    string,
    Map<string, TaskTiming & { started?: number; reverting?: number }>
  >();
  const onTask = (e: TaskStateEvent) => {
    let tasks = flows.get(e.flowId);
    if (!tasks) flows.set(e.flowId, (tasks = new Map()));
    let t = tasks.get(e.task);
    if (!t) tasks.set(e.task, (t = { flowId: e.flowId, task: e.task, attempts: 0 }));
    switch (e.state) {
      case 'RUNNING':
        t.started ??= e.at;
        t.attempts = e.attempt;
        break;
      case 'SUCCESS':
      case 'FAILURE':
      case 'CANCELLED':
        if (t.started !== undefined) t.executeMs = e.at - t.started;
        t.started = undefined;
        break;
      case 'REVERTING':
        t.reverting = e.at;
        break;
      case 'REVERTED':
      case 'REVERT_FAILURE':
        t.revertMs = t.reverting === undefined ? 0 : e.at - t.reverting;
        break;
      default:
        break;
    }
  };
  const off = engine.on('task:state', onTask);
  return {
    timings: (flowId) =>
      [...(flows.get(flowId)?.values() ?? [])].map(({ started: _s, reverting: _r, ...t }) => t),
    clear: (flowId) => (flowId === undefined ? flows.clear() : void flows.delete(flowId)),
    off,
    [Symbol.dispose]: off,
  };
}

/** Options of {@link otelListener}. */
export interface OtelListenerOptions {
  /** A tracer from `@opentelemetry/api`. @default trace.getTracer('@rigging/tasks') */
  tracer?: unknown;
}

interface OtelSpan {
  setAttribute(k: string, v: string | number | boolean): unknown;
  setStatus(s: { code: number; message?: string }): unknown;
  addEvent(name: string, attrs?: Record<string, string | number>): unknown;
  end(t?: number): void;
}
interface OtelTracer {
  startSpan(
    name: string,
    options?: { startTime?: number; attributes?: Record<string, string | number> },
    ctx?: unknown,
  ): OtelSpan;
}
interface OtelApi {
  trace: { getTracer(name: string): OtelTracer; setSpan(ctx: unknown, span: OtelSpan): unknown };
  context: { active(): unknown };
  SpanStatusCode: { OK: number; ERROR: number };
}

/**
 * Emits OpenTelemetry spans: one per flow run (`flow <name>`), a child per task execution
 * (`task <name>`) and per revert (`revert <name>`). Needs the optional peer `@opentelemetry/api`
 * (imported now); rejects with a clear error when it is not installed.
 */
export async function otelListener(
  engine: Engine,
  options: OtelListenerOptions = {},
): Promise<() => void> {
  let api: OtelApi;
  try {
    api = (await import('@opentelemetry/api')) as unknown as OtelApi;
  } catch (cause) {
    throw new Error(
      'otelListener needs the optional peer dependency @opentelemetry/api; install it',
      { cause },
    );
  }
  const tracer =
    (options.tracer as OtelTracer | undefined) ?? api.trace.getTracer('@rigging/tasks');
  const flows = new Map<string, { span: OtelSpan; ctx: unknown; tasks: Map<string, OtelSpan> }>();
  const flowOf = (flowId: string, name: string, at: number) => {
    let f = flows.get(flowId);
    if (!f) {
      const span = tracer.startSpan(`flow ${name}`, {
        startTime: at,
        attributes: { 'rigging.flow_id': flowId, 'rigging.flow': name },
      });
      f = { span, ctx: api.trace.setSpan(api.context.active(), span), tasks: new Map() };
      flows.set(flowId, f);
    }
    return f;
  };
  const offFlow = engine.on('flow:state', (e: FlowStateEvent) => {
    const f = flowOf(e.flowId, e.flow, e.at);
    f.span.addEvent(e.state);
    if (['SUCCESS', 'REVERTED', 'REVERT_FAILURE', 'CANCELLED', 'SUSPENDED'].includes(e.state)) {
      f.span.setAttribute('rigging.flow_state', e.state);
      if (e.state === 'SUCCESS') f.span.setStatus({ code: api.SpanStatusCode.OK });
      else if (e.state !== 'SUSPENDED')
        f.span.setStatus({
          code: api.SpanStatusCode.ERROR,
          message: e.failure?.message ?? e.state,
        });
      for (const s of f.tasks.values()) s.end(e.at);
      f.span.end(e.at);
      flows.delete(e.flowId);
    }
  });
  const offTask = engine.on('task:state', (e: TaskStateEvent) => {
    const f = flowOf(e.flowId, e.flow, e.at);
    const key = e.task;
    const start = (kind: string) => {
      f.tasks.get(key)?.end(e.at);
      const span = tracer.startSpan(
        `${kind} ${e.task}`,
        {
          startTime: e.at,
          attributes: {
            'rigging.task': e.task,
            'rigging.flow_id': e.flowId,
            'rigging.attempt': e.attempt,
          },
        },
        f.ctx,
      );
      f.tasks.set(key, span);
    };
    const end = (ok: boolean) => {
      const span = f.tasks.get(key);
      if (!span) return;
      span.setAttribute('rigging.task_state', e.state);
      span.setStatus(
        ok
          ? { code: api.SpanStatusCode.OK }
          : { code: api.SpanStatusCode.ERROR, message: e.failure?.message ?? e.state },
      );
      span.end(e.at);
      f.tasks.delete(key);
    };
    if (e.state === 'RUNNING') {
      if (!f.tasks.has(key)) start('task');
      else f.tasks.get(key)!.addEvent('RUNNING', { attempt: e.attempt });
    } else if (e.state === 'RETRYING')
      f.tasks.get(key)?.addEvent('RETRYING', { attempt: e.attempt });
    else if (e.state === 'REVERTING') start('revert');
    else if (e.state === 'SUCCESS' || e.state === 'REVERTED') end(true);
    else if (e.state === 'FAILURE' || e.state === 'REVERT_FAILURE' || e.state === 'CANCELLED')
      end(false);
  });
  return () => {
    offFlow();
    offTask();
  };
}
