import { RiggingError, type Clock, type Logger } from '@rigging/core';
import type { FlowEngine, RunOrResumeOptions } from './engine-types.js';
import type { Flow } from './flow.js';
import type { TaskLog } from './log.js';
import type { Task } from './task.js';

/** Why {@link runOrResume} tries again; `undefined` when `error` is not worth waiting out. */
export function waitReason(
  error: unknown,
  log: TaskLog,
): 'flow_busy' | 'flow_exists' | 'connection_lost' | undefined {
  if (RiggingError.hasCode(error, 'tasks.flow_busy')) return 'flow_busy';
  if (RiggingError.hasCode(error, 'tasks.flow_exists')) return 'flow_exists';
  if (isConnectionLoss(error, log)) return 'connection_lost';
  return undefined;
}

/**
 * Whether `error`, or one of its causes, is a lost connection to the log's store, as the log
 * itself says ({@link TaskLog.isConnectionLoss}; the memory log has no connection to lose).
 */
export function isConnectionLoss(error: unknown, log: TaskLog): boolean {
  const check = log.isConnectionLoss;
  if (typeof check !== 'function') return false;
  let e: unknown = error;
  for (let depth = 0; depth < 8 && e !== null && e !== undefined; depth++) {
    if (check.call(log, e)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** What {@link runOrResume} needs: the engine, and its clock and logger. */
export interface RunOrResumeHost {
  readonly engine: FlowEngine;
  readonly clock: Clock;
  readonly logger: Logger;
}

/**
 * Runs `flow` as `flowId`, or resumes it when the log already has it. See
 * {@link Engine.runOrResume}.
 * @internal
 */
export async function runOrResume(
  { engine, clock, logger }: RunOrResumeHost,
  flow: Flow | Task,
  options: RunOrResumeOptions<unknown>,
): Promise<unknown> {
  if (!options || typeof options !== 'object')
    throw new TypeError('runOrResume(flow, options): options must be an object');
  const { flowId, signal, cancel, migrate, lease, resumeFirst } = options;
  if (typeof flowId !== 'string' || !flowId) {
    throw new TypeError(
      `runOrResume(flow, { flowId }): flowId must be a non-empty string, got ${JSON.stringify(flowId)}`,
    );
  }
  const inputs = (options.inputs ?? {}) as Record<string, unknown>;
  if (typeof inputs !== 'object' || inputs === null || Array.isArray(inputs))
    throw new TypeError('runOrResume(flow, { inputs }): inputs must be an object');
  if (resumeFirst !== undefined && typeof resumeFirst !== 'boolean')
    throw new TypeError(
      `runOrResume: resumeFirst must be a boolean, got ${JSON.stringify(resumeFirst)}`,
    );
  const pollMs = options.pollMs ?? 250;
  if (!(Number.isFinite(pollMs) && pollMs >= 0))
    throw new TypeError(`runOrResume: pollMs must be a non-negative number, got ${String(pollMs)}`);
  const timeoutMs = options.timeoutMs;
  if (timeoutMs !== undefined && !(timeoutMs >= 0))
    throw new TypeError(
      `runOrResume: timeoutMs must be a non-negative number, got ${String(timeoutMs)}`,
    );
  signal?.throwIfAborted();
  const deadline = timeoutMs === undefined ? Infinity : clock.now() + timeoutMs;

  const stopping = signal && suspendOnAbort(engine, flowId, signal);
  try {
    let exists = resumeFirst === true;
    /** Whether a resume found no flow: it is run instead, once. */
    let missing = false;
    for (let attempt = 1; ; attempt++) {
      try {
        if (!exists) {
          return await engine.run(flow, {
            inputs,
            flowId,
            ...(cancel ? { signal: cancel } : {}),
            ...(lease ? { lease } : {}),
          });
        }
        return await engine.resume(flowId, flow, {
          inputs,
          ...(cancel ? { signal: cancel } : {}),
          ...(migrate ? { migrate } : {}),
          ...(lease ? { lease } : {}),
        });
      } catch (error) {
        if (exists && !missing && RiggingError.hasCode(error, 'tasks.flow_not_found')) {
          missing = true;
          exists = false;
          continue; // resumed first (`resumeFirst`), but the log does not have it: a new flow
        }
        const reason = waitReason(error, engine.log);
        if (reason === undefined) throw error;
        if (reason === 'flow_exists') {
          exists = true;
          continue; // resume at once: another creator won the race, or an earlier owner left it
        }
        if (signal?.aborted || clock.now() + pollMs > deadline) throw error;
        // After a lost connection the flow may exist or not (the create may have committed).
        if (reason === 'connection_lost') exists = false;
        logger.debug(
          { err: error, flowId, attempt, reason },
          'runOrResume: waiting before trying the flow again',
        );
        await clock.sleep(pollMs, { signal });
      }
    }
  } finally {
    stopping?.[Symbol.dispose]();
  }
}

/**
 * Suspends `flowId` in `engine` when `signal` aborts (never cancels it). The flow may not be
 * active yet when the signal aborts (its lease is being taken): then the first transition it
 * emits is where it is asked to suspend. Dispose to stop watching.
 * @internal
 */
export function suspendOnAbort(
  engine: FlowEngine,
  flowId: string,
  signal: AbortSignal,
): Disposable {
  let unsubscribe: (() => void) | undefined;
  const onStop = () => {
    unsubscribe = engine.on('flow:state', (e) => {
      if (e.flowId !== flowId) return;
      unsubscribe?.();
      void engine.suspend(flowId);
    });
    void engine.suspend(flowId).then((done) => done && unsubscribe?.());
  };
  if (signal.aborted) onStop();
  else signal.addEventListener('abort', onStop, { once: true });
  return {
    [Symbol.dispose]() {
      signal.removeEventListener('abort', onStop);
      unsubscribe?.();
    },
  };
}
