// Callers waiting for the outcome of an op (`call`, `wait`), settled by a local handler run, by
// another process (a wake-up or a poll), or by close().
import { deferred, scopedSignal, type Clock, type WaitOptions } from '@rigging/core';
import type { QueueBackend } from './backend.js';
import { QueueError } from './errors.js';
import type { OpInfo } from './types.js';

/** Waited ops looked up by one read of a poll. */
const POLL_BATCH = 500;

/** Op statuses that no longer change. @internal */
export const TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled']);

interface Waiter {
  /** The op ended; a local run passes its own error and result. */
  ended: (op: OpInfo, localError: unknown, localResult: unknown) => void;
  reject: (error: unknown) => void;
}

/** The outcome of an op as a waiter gets it: its result, or the error `call` rejects with. */
function outcomeError(op: OpInfo, localError: unknown): QueueError {
  if (op.status === 'failed') {
    return new QueueError(
      'async-queue.op_failed',
      `op ${op.id} (${op.type} on '${op.key}') failed after ${op.attempts} attempt(s): ${op.error?.message ?? 'unknown error'}`,
      {
        cause: localError ?? op.error,
        details: { id: op.id, key: op.key, type: op.type, attempts: op.attempts },
      },
    );
  }
  return new QueueError(
    'async-queue.op_cancelled',
    op.cancelledBy === 'discard'
      ? `op ${op.id} (${op.type} on '${op.key}') was discarded`
      : `op ${op.id} (${op.type} on '${op.key}') was cancelled because op ${op.cancelledBy ?? '?'} failed before it`,
    { details: { id: op.id, key: op.key, type: op.type, cancelledBy: op.cancelledBy ?? null } },
  );
}

/** The waiters of one queue instance, by op id. @internal */
export class Waiters {
  readonly #waiters = new Map<string, Set<Waiter>>();
  /** Ops whose outcome a local handler run has not yet reported (it settles them itself). */
  readonly #unsettled = new Set<string>();

  constructor(private readonly backend: QueueBackend) {}

  /** A local handler run of `id` starts: it will settle the waiters. */
  running(id: string): void {
    this.#unsettled.add(id);
  }

  /** The local run of `id` is over (settled or not). */
  ran(id: string): void {
    this.#unsettled.delete(id);
  }

  /** True while a local handler runs (or settles) `id`. */
  runningHere(id: string): boolean {
    return this.#unsettled.has(id);
  }

  /** Waits for the outcome of `id`; `signal`/`timeoutMs` end the wait, not the op. */
  async wait(id: string, options: WaitOptions): Promise<unknown> {
    const d = deferred<unknown>();
    const waiter: Waiter = {
      ended: (op, localError, localResult) => {
        if (op.status === 'succeeded')
          d.resolve(localResult !== undefined ? localResult : op.result);
        else d.reject(outcomeError(op, localError));
      },
      reject: d.reject,
    };
    using scope = scopedSignal({
      ...options,
      onTimeout: () =>
        new QueueError(
          'async-queue.timeout',
          `op ${id} did not finish within ${options.timeoutMs} ms`,
          { details: { id } },
        ),
    });
    const onAbort = () => d.reject(scope.signal.reason);
    return this.#waiting(id, waiter, d.promise, scope.signal, onAbort);
  }

  /**
   * The op once it has ended, or as it is after `waitMs` (read again then); undefined when there
   * is no such op. `signal` rejects with its reason.
   */
  async ended(
    id: string,
    waitMs: number,
    signal: AbortSignal | undefined,
  ): Promise<OpInfo | undefined> {
    const d = deferred<OpInfo | undefined>();
    const waiter: Waiter = {
      ended: (end, _localError, localResult) =>
        d.resolve(
          localResult !== undefined && end.result === undefined
            ? { ...end, result: localResult }
            : end,
        ),
      reject: d.reject,
    };
    using scope = scopedSignal({ signal, timeoutMs: waitMs });
    // Resolving with undefined ends the wait without an end: no such op, or `waitMs` ran out.
    const onAbort = () => {
      if (signal?.aborted) d.reject(signal.reason);
      else d.resolve(undefined);
    };
    let found = true;
    const end = await this.#waiting(id, waiter, d.promise, scope.signal, onAbort, (current) => {
      found = current !== undefined;
      if (!found) d.resolve(undefined);
    });
    return end ?? (found ? this.backend.get(id) : undefined);
  }

  /**
   * Registers `waiter` for `id`, reads the op (it may have ended meanwhile; `onRead` sees it),
   * and awaits `done`.
   */
  async #waiting<T>(
    id: string,
    waiter: Waiter,
    done: Promise<T>,
    signal: AbortSignal,
    onAbort: () => void,
    onRead?: (current: OpInfo | undefined) => void,
  ): Promise<T> {
    // It may settle while the look-up below is in flight: not an unhandled rejection.
    done.catch(() => {});
    let set = this.#waiters.get(id);
    if (!set) this.#waiters.set(id, (set = new Set()));
    set.add(waiter);
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      if (signal.aborted) onAbort();
      // Ends announced from here on reach `settle`; one announced before shows in the read.
      await this.backend.watchEnds?.();
      // It may have finished already (fast handler, idempotent repeat, another process).
      const current = await this.backend.get(id);
      onRead?.(current);
      if (current && TERMINAL.has(current.status) && !this.runningHere(id)) this.settle(current);
      return await done;
    } finally {
      signal.removeEventListener('abort', onAbort);
      const s = this.#waiters.get(id);
      s?.delete(waiter);
      if (s?.size === 0) this.#waiters.delete(id);
    }
  }

  /**
   * Settles the waiters of `op` if it is finished. A local run passes its own error (kept as the
   * `cause`) and result (not read back from storage).
   */
  settle(op: OpInfo, localError?: unknown, localResult?: unknown): void {
    if (TERMINAL.has(op.status)) this.#unsettled.delete(op.id);
    const set = this.#waiters.get(op.id);
    if (!set || !TERMINAL.has(op.status)) return;
    this.#waiters.delete(op.id);
    for (const w of set) w.ended(op, localError, localResult);
  }

  /** Another process finished `id`: settle its local waiters from storage. */
  remoteSettled(id: string): void {
    if (!this.#waiters.has(id) || this.runningHere(id)) return;
    this.backend.get(id).then(
      (op) => {
        if (op) this.settle(op);
      },
      () => {},
    );
  }

  /**
   * Durable backends: looks up every waited op now and then (an end may not be announced, or its
   * announcement missed), in reads of up to {@link POLL_BATCH} ops where the backend has
   * `getMany`.
   */
  async pollLoop(every: number, clock: Clock, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await clock.sleep(every, { signal }).catch(() => {});
      if (signal.aborted) return;
      const ids = [...this.#waiters.keys()].filter((id) => !this.runningHere(id));
      const { getMany } = this.backend;
      if (getMany) {
        for (let i = 0; i < ids.length; i += POLL_BATCH) {
          const ops = await getMany
            .call(this.backend, ids.slice(i, i + POLL_BATCH))
            .catch(() => []);
          for (const op of ops) this.settle(op);
        }
        continue;
      }
      for (const id of ids) {
        const op = await this.backend.get(id).catch(() => undefined);
        if (op) this.settle(op);
      }
    }
  }

  /** Rejects every waiter (the queue closed). */
  rejectAll(error: () => unknown): void {
    for (const set of this.#waiters.values()) for (const w of set) w.reject(error());
    this.#waiters.clear();
  }
}
