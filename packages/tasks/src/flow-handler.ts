import { RiggingError, type Lease } from '@rigging/core';
import type { FlowEngine, MigrateHook } from './engine-types.js';
import type { Flow } from './flow.js';
import type { TaskLog } from './log.js';
import { isConnectionLoss } from './run-or-resume.js';
import type { Task } from './task.js';

/**
 * What {@link flowHandler} needs from a queue handler's context (typed structurally: any queue
 * whose handler context has these members works).
 */
export interface FlowHandlerContext {
  /** The op's id: by default, the flow's id. */
  readonly opId: string;
  /**
   * Aborts when the op must stop without finishing: the queue is shutting down or its claim on
   * the op was lost. It means "give the op back", never "cancel and revert".
   */
  readonly signal: AbortSignal;
  /**
   * Hands the op back to the head of its key without failing it and without spending an attempt
   * (after `delayMs`, when given). Throws the queue's marker; never returns.
   */
  giveBack(reason?: string, opts?: { delayMs?: number }): never;
  /**
   * The queue's claim on the op as a lease (its fencing token, `lost` when the claim ends):
   * what a flow runs under with `ownership: 'claim'`.
   */
  readonly lease?: Lease;
  /**
   * Which delivery of the op this is (1: the first). A later one resumes the op's flow first
   * (`runOrResume`'s `resumeFirst`): its first task does not run again, even in part.
   */
  readonly attempt?: number;
}

/** Options of {@link flowHandler}. */
export interface FlowHandlerOptions<P, I> {
  /** The flow's id for an op (the same op must always give the same id). @default ctx.opId */
  flowId?: (payload: P, ctx: FlowHandlerContext) => string;
  /** The flow's inputs for an op. @default the payload itself */
  inputs?: (payload: P, ctx: FlowHandlerContext) => I;
  /** Passed on to `resume` (a log written by an older flow definition). */
  migrate?: MigrateHook;
  /** Pause between two tries while the flow is busy elsewhere or the connection is lost. @default 250 */
  pollMs?: number;
  /**
   * Give the op back when the flow is still busy elsewhere after this long (its owner may be
   * alive and slow). @default wait until the context's signal aborts
   */
  busyTimeoutMs?: number;
  /** `delayMs` of every give-back (how soon the queue offers the op again). @default the queue's default */
  giveBackDelayMs?: number;
  /**
   * Who owns a running flow. `'engine'`: the engine's lock on the flow (with the engine's
   * `locks`), taken and released per run. `'claim'`: the queue's claim on the op (`ctx.lease`):
   * its fencing token fences the flow's writes and its loss stops the flow, with no lock writes
   * per op and no waiting for a dead owner's lock to expire; whoever holds the op owns its flow.
   * Keep one choice for the life of a log: the two sources' tokens are not comparable.
   * @default 'engine'
   */
  ownership?: 'engine' | 'claim';
}

/** A queue handler that runs a flow per op: `(payload, ctx) => the flow's outputs`. */
export type FlowQueueHandler<P, O> = (payload: P, ctx: FlowHandlerContext) => Promise<O>;

/**
 * Why a flow that stopped with `error` can still finish later (the op should be given back), or
 * `undefined` when it failed for real (the op should fail).
 */
export function resumableReason(
  error: unknown,
  log: TaskLog,
  signal?: AbortSignal,
):
  | 'suspended'
  | 'ownership_lost'
  | 'flow_busy'
  | 'fenced'
  | 'connection_lost'
  | 'stopped'
  | undefined {
  if (RiggingError.hasCode(error, 'tasks.suspended')) return 'suspended';
  if (RiggingError.hasCode(error, 'tasks.ownership_lost')) return 'ownership_lost';
  if (RiggingError.hasCode(error, 'tasks.flow_busy')) return 'flow_busy';
  if (RiggingError.hasCode(error, 'tasks.fenced')) return 'fenced';
  if (isConnectionLoss(error, log)) return 'connection_lost';
  // The waiting ended because the queue asked the op back (its signal's reason is thrown).
  if (signal?.aborted && error === signal.reason) return 'stopped';
  return undefined;
}

/**
 * Makes a queue handler that runs `flow` for each op, or resumes it when the op comes again
 * (completed tasks are not run again). The flow's id derives from the op's id; the flow's
 * outputs are the op's result.
 *
 * - The context's `signal` (shutdown, lost claim) suspends the flow at the next task boundary:
 *   nothing is reverted, and the op is given back.
 * - A flow that can still finish — suspended, its lease lost, busy in another engine (an owner
 *   not yet known to be gone), or its log's connection lost — gives the op back
 *   (`ctx.giveBack(reason)`): the op is not failed and spends no attempt; whoever takes it next
 *   resumes the flow.
 * - A real failure (the flow failed and its completed tasks were reverted, a revert failed, the
 *   log was written by an incompatible definition, …) is thrown: the op fails and its key's
 *   failure policy applies.
 */
export function flowHandler<I, O, P = I>(
  engine: FlowEngine,
  flow: Flow<I, O> | Task<I, O>,
  options: FlowHandlerOptions<P, I> = {},
): FlowQueueHandler<P, O> {
  if (!engine || typeof engine.runOrResume !== 'function')
    throw new TypeError('flowHandler(engine, flow, options): engine must be an Engine');
  if (!flow || typeof flow !== 'object' || typeof flow.kind !== 'string')
    throw new TypeError('flowHandler(engine, flow, options): flow must be a flow or a task');
  if (options === null || typeof options !== 'object')
    throw new TypeError('flowHandler(engine, flow, options): options must be an object');
  const { flowId, inputs, migrate, pollMs, busyTimeoutMs, giveBackDelayMs } = options;
  const ownership = options.ownership ?? 'engine';
  if (ownership !== 'engine' && ownership !== 'claim')
    throw new TypeError(
      `flowHandler: options.ownership must be 'engine' or 'claim', got ${JSON.stringify(ownership)}`,
    );
  if (flowId !== undefined && typeof flowId !== 'function')
    throw new TypeError('flowHandler: options.flowId must be a function (payload, ctx) => string');
  if (inputs !== undefined && typeof inputs !== 'function')
    throw new TypeError('flowHandler: options.inputs must be a function (payload, ctx) => inputs');
  if (giveBackDelayMs !== undefined && !(giveBackDelayMs >= 0))
    throw new TypeError(
      `flowHandler: options.giveBackDelayMs must be a non-negative number, got ${String(giveBackDelayMs)}`,
    );
  return async (payload, ctx) => {
    const id = flowId ? flowId(payload, ctx) : ctx.opId;
    if (ownership === 'claim' && !ctx.lease)
      throw new TypeError(
        "flowHandler: ownership 'claim' needs the queue's claim as ctx.lease (@rigging/async-queue gives it)",
      );
    try {
      return await engine.runOrResume(flow, {
        flowId: id,
        inputs: inputs ? inputs(payload, ctx) : (payload as unknown as I),
        signal: ctx.signal,
        ...(migrate ? { migrate } : {}),
        ...(pollMs !== undefined ? { pollMs } : {}),
        ...(busyTimeoutMs !== undefined ? { timeoutMs: busyTimeoutMs } : {}),
        ...(ownership === 'claim' ? { lease: ctx.lease } : {}),
        ...((ctx.attempt ?? 1) > 1 ? { resumeFirst: true } : {}),
      });
    } catch (error) {
      const reason = resumableReason(error, engine.log, ctx.signal);
      if (reason === undefined) throw error;
      const message = error instanceof Error ? error.message : String(error);
      ctx.giveBack(
        `flow ${id} can be resumed (${reason}): ${message}`,
        giveBackDelayMs === undefined ? undefined : { delayMs: giveBackDelayMs },
      );
      throw error; // a giveBack that returned: keep the flow's own error
    }
  };
}
