import { serializeError, type Json, type JsonObject } from '@rigging/core';
import type { TaskFailure } from './errors.js';
import type { FlowStateEvent, TaskStateEvent } from './events.js';
import {
  SETTLED,
  type FlowDefinition,
  type FlowRecord,
  type FlowState,
  type LogEntry,
  type TaskState,
} from './log.js';
import type { RunContext } from './run-context.js';
import type { FlowRetry, RunState } from './run-state.js';
import { protect, REDACTED, reveal } from './secrets.js';

/** @internal Whether `value` is a promise (or any thenable). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** @internal The failure record of `error` thrown by `task` (null: the flow itself). */
export function failureOf(task: string | null, error: unknown): TaskFailure {
  return { ...serializeError(error), task };
}

/** @internal Task states the journal writes with {@link RunJournal.task} (RUNNING, SUCCESS and REVERTED have their own methods). */
export type TaskMove =
  'FAILURE' | 'RETRYING' | 'CANCELLED' | 'REVERTING' | 'REVERT_FAILURE' | 'PENDING';

/** A held entry (see {@link RunJournal}): its atom and, for a SUCCESS, the result for its event. */
interface Held {
  index: number;
  entry: LogEntry;
  result: unknown;
}

/** What a journal holds when nothing is: shared, never written to (see `RunJournal.#hold`). */
const NOTHING_HELD: readonly Held[] = Object.freeze([]);

/**
 * @internal The only writer of a run's {@link RunState} transitions that the log records: each
 * method appends its entries to the log (durable before the method's promise settles), then
 * applies them to the state and emits `task:state` / `flow:state`. `restore` folds a stored log
 * into the state through the same transitions.
 *
 * One commit per task: a task's SUCCESS (and a task's REVERTED) is *held* — applied to the state
 * at once, so that the scheduler can start what depends on it — and written with the run's next
 * append, which always comes before anything that depends on it runs: the next task's RUNNING,
 * the next revert's REVERTING, the flow's final state, or {@link RunJournal.flush}, which the
 * schedulers call before they wait with nothing to start. Likewise the flow's record is created
 * with the first task's RUNNING. Its event is emitted once that write is durable. A crash before
 * that write leaves the task RUNNING (or REVERTING) in the log: it runs again on resume, exactly
 * like a task whose process died inside `execute` (at-least-once for the task in flight).
 *
 * On a log whose `append` is already durable when it returns (the memory log), `running` applies
 * synchronously and returns the shared settled promise `SETTLED` (and `succeeded` writes nothing):
 * the caller can go on without a tick.
 */
export class RunJournal {
  readonly flowId: string;
  readonly #context: RunContext;
  readonly #state: RunState;
  /** Sequence number of the last entry written (or restored). */
  #seq = 0;
  readonly #token: bigint | null;
  /** The `update` of every task-level append (built once per run). */
  readonly #tokenOnly: { token: bigint | null };
  /** Held entries (SUCCESS, REVERTED), written with the next append; their events follow it. */
  #held: readonly Held[] = NOTHING_HELD;
  /** The new flow's record and first entry, created with the first append. */
  #create: { record: FlowRecord; entry: LogEntry } | undefined;
  /** The flow's SUCCESS committed with its last task's transaction, its event not emitted yet. */
  #finished: LogEntry | undefined;

  constructor(context: RunContext, state: RunState) {
    this.#context = context;
    this.#state = state;
    this.flowId = context.flowId;
    this.#token = context.lease?.token ?? null;
    this.#tokenOnly = { token: this.#token };
  }

  /**
   * The new flow (state RUNNING, its first entry) with its definition and stored inputs: created
   * in the log with the first task's RUNNING (or whatever the run writes first), in one commit.
   */
  create(definition: FlowDefinition, inputs: JsonObject): void {
    const at = this.#context.clock.now();
    const token = this.#token;
    this.#create = {
      record: {
        flowId: this.flowId,
        name: this.#context.compiled.root.name,
        state: 'RUNNING',
        definition,
        inputs,
        token,
        createdAt: at,
        updatedAt: at,
      },
      entry: { seq: ++this.#seq, task: null, state: 'RUNNING', at, token },
    };
  }

  /** Atom `index` starts its next attempt: RUNNING (the attempt is counted before the write). */
  running(index: number): Promise<void> {
    this.#state.nextAttempt(index);
    const entry = this.#entry(index, 'RUNNING');
    const written = this.#append([entry], this.#tokenOnly);
    if (written === SETTLED) {
      this.#entered(index, entry);
      return SETTLED;
    }
    return written.then(() => this.#entered(index, entry));
  }

  /**
   * Atom `index` returned `result` (JSON, checked by the caller): SUCCESS with its stored result,
   * held for the next append (see the class); the state moves at once. Nothing is written here.
   */
  succeeded(index: number, result: unknown): void {
    const entry = this.#entry(index, 'SUCCESS');
    const stored = this.#sensitive(index) ? protect(result, this.#context.key) : (result as Json);
    entry.result = stored;
    this.#state.completed(index, stored, result);
    this.#hold({ index, entry, result });
  }

  /** Atom `index` was reverted (or had nothing to revert): REVERTED, held for the next append. */
  reverted(index: number): void {
    const entry = this.#entry(index, 'REVERTED');
    this.#state.entered(index, 'REVERTED');
    this.#state.revertEnded({ task: entry.task!, state: 'REVERTED' });
    this.#hold({ index, entry, result: undefined });
  }

  /**
   * Atom `index` was logged RUNNING but the run stopped before executing it (a stop requested
   * while that entry was being written): PENDING again with its previous attempt count, held.
   */
  notStarted(index: number): void {
    this.#state.entered(index, 'PENDING', this.#state.attempt(index) - 1);
    this.#hold({ index, entry: this.#entry(index, 'PENDING'), result: undefined });
  }

  /**
   * Atom `index`, a task defined with `transaction: true`, starts an attempt: counted, not
   * written (a transaction that does not commit leaves nothing of it). What is held is written
   * first, and the new flow's record too when another task may run meanwhile: only this task's
   * own entries (and the flow's creation, or its end) ride on its transaction.
   */
  async transactionStarting(index: number): Promise<void> {
    this.#state.nextAttempt(index);
    if (this.#held.length > 0 || (this.#create !== undefined && this.#context.concurrency > 1))
      await this.#append([], this.#tokenOnly);
    this.#state.entered(index, 'RUNNING');
    const event: LogEntry = {
      seq: this.#seq, // not written: the event only
      task: this.#context.compiled.atoms[index]!.name,
      state: 'RUNNING',
      attempt: this.#state.attempt(index),
      at: this.#context.clock.now(),
    };
    this.#emitTask(index, event, false, undefined);
  }

  /** Atom `index`, a transactional task, was not started after all (see {@link notStarted}). */
  transactionNotStarted(index: number): void {
    this.#state.entered(index, 'PENDING', this.#state.attempt(index) - 1);
  }

  /**
   * Runs `work` (atom `index`'s execute, result checked) in one transaction of the log with the
   * task's SUCCESS — and the flow's creation when it is new, and the flow's SUCCESS when nothing
   * else is left to run or write — committed together. Then the state moves and the events go.
   * On any failure nothing was written and the state is as before.
   */
  async committed(index: number, work: (transaction: unknown) => Promise<unknown>): Promise<void> {
    const log = this.#context.log;
    const state = this.#state;
    const create = this.#create;
    this.#create = undefined;
    const before = this.#seq;
    const entry = this.#entry(index, 'SUCCESS');
    let end: LogEntry | undefined;
    let result: unknown;
    try {
      await log.transaction!(this.flowId, async (transaction) => {
        result = await work(transaction);
        entry.result = this.#sensitive(index)
          ? protect(result, this.#context.key)
          : (result as Json);
        end ??= this.#endsWith(index) ? this.#flowEntry('SUCCESS') : undefined;
        const entries: LogEntry[] = [];
        if (create) entries.push(create.entry);
        entries.push(entry);
        if (end) entries.push(end);
        const update = end ? { state: 'SUCCESS' as const, token: this.#token } : this.#tokenOnly;
        if (create) {
          create.record.state = end ? 'SUCCESS' : 'RUNNING';
          create.record.updatedAt = entries[entries.length - 1]!.at;
        }
        return { value: undefined, create: create?.record, entries, update };
      });
    } catch (error) {
      this.#create = create;
      if (this.#seq === (end ?? entry).seq) this.#seq = before; // no gap in the log's positions
      throw error;
    }
    if (create) this.#emitFlow('RUNNING', create.entry.at);
    state.completed(index, entry.result!, result);
    this.#emitTask(index, entry, true, result);
    if (end) this.#finished = end;
  }

  /** Whether the flow ends with atom `index`'s success: every other task done, nothing held, no stop. */
  #endsWith(index: number): boolean {
    const state = this.#state;
    if (this.#held.length > 0 || state.stopReason !== undefined || state.failures.length > 0)
      return false;
    if (state.fatal !== undefined || state.flowRetry !== undefined) return false;
    const atoms = this.#context.compiled.atoms;
    for (let k = 0; k < atoms.length; k++)
      if (k !== index && state.state(k) !== 'SUCCESS') return false;
    return true;
  }

  /** Whether the flow's SUCCESS was committed with its last task (see {@link committed}). */
  get finished(): boolean {
    return this.#finished !== undefined;
  }

  /** Writes what is held, if anything (undefined when nothing is). */
  flush(): Promise<void> | undefined {
    if (this.#held.length === 0 && this.#create === undefined) return undefined;
    return this.#append([], this.#tokenOnly);
  }

  /**
   * Atom `index` moves to `state`: FAILURE (the flow will revert for `failure`), RETRYING,
   * CANCELLED, REVERTING, REVERT_FAILURE (the revert's outcome is recorded), PENDING (its
   * sub-flow runs again: attempt 0).
   */
  async task(index: number, state: TaskMove, failure?: TaskFailure): Promise<void> {
    if (state === 'PENDING') this.#state.reset(index);
    const entry = this.#entry(index, state);
    if (failure) entry.failure = failure;
    await this.#append([entry], this.#tokenOnly);
    this.#entered(index, entry);
    const name = entry.task!;
    if (state === 'FAILURE') this.#state.failed(failure!);
    else if (state === 'REVERT_FAILURE') this.#state.revertEnded({ task: name, state, failure });
  }

  /**
   * Atom `index` failed and its sub-flow `retry.name` will be reverted and run again: the task's
   * RETRYING (not FAILURE: a resume re-runs it) and the sub-flow's failed attempt, atomically (a
   * resume continues the count).
   */
  async flowRetrying(index: number, retry: FlowRetry): Promise<void> {
    const entry = this.#entry(index, 'RETRYING');
    entry.failure = retry.failure;
    const subflow: LogEntry = {
      seq: ++this.#seq,
      task: retry.name,
      subflow: true,
      state: 'RETRYING',
      attempt: retry.attempt,
      failure: retry.failure,
      at: entry.at,
      token: this.#token,
    };
    await this.#append([entry, subflow], this.#tokenOnly);
    this.#entered(index, entry);
    this.#state.flowAttemptFailed(retry.name, retry.attempt, retry.failure, retry);
  }

  /** Attempt `attempt` of sub-flow `name` starts (durable before any of its tasks runs). */
  async flowAttemptStarted(name: string, attempt: number): Promise<void> {
    await this.#append(
      [
        {
          seq: ++this.#seq,
          task: name,
          subflow: true,
          state: 'RUNNING',
          attempt,
          at: this.#context.clock.now(),
          token: this.#token,
        },
      ],
      this.#tokenOnly,
    );
    this.#state.flowAttemptStarted(name, attempt);
  }

  /** The flow moves to `state` (RUNNING: forward; REVERTING: reverting for `failure`). */
  async flow(state: FlowState, failure?: TaskFailure): Promise<void> {
    const finished = this.#finished;
    if (finished !== undefined && state === 'SUCCESS') {
      this.#finished = undefined;
      this.#emitFlow('SUCCESS', finished.at);
      return;
    }
    const entry = this.#flowEntry(state);
    const at = entry.at;
    if (failure) entry.failure = failure;
    await this.#append([entry], { state, token: this.#token });
    if (state === 'RUNNING') this.#state.phaseEntered('forward');
    else if (state === 'REVERTING') this.#state.phaseEntered('revert', failure);
    this.#emitFlow(state, at, failure);
  }

  /** Folds a stored log into the state (task names mapped through `rename`). */
  restore(entries: readonly LogEntry[], rename: ReadonlyMap<string, string>): void {
    const state = this.#state;
    const compiled = this.#context.compiled;
    for (const entry of entries) {
      if (entry.seq > this.#seq) this.#seq = entry.seq;
      if (entry.task === null) {
        if (entry.state === 'REVERTING') state.phaseEntered('revert', entry.failure);
        else if (entry.state === 'RUNNING') state.phaseEntered('forward');
        continue;
      }
      if (entry.subflow === true) {
        const scope = compiled.scopes.get(rename.get(entry.task) ?? entry.task);
        if (!scope || entry.attempt === undefined) continue;
        if (entry.state === 'RETRYING')
          state.flowAttemptFailed(scope.name, entry.attempt, entry.failure ?? failureOf(null, ''));
        else if (entry.state === 'RUNNING') state.flowAttemptStarted(scope.name, entry.attempt);
        continue;
      }
      const atom = compiled.byName.get(rename.get(entry.task) ?? entry.task);
      if (!atom) continue;
      const index = atom.index;
      if (entry.state === 'SUCCESS') {
        const revealed = reveal(entry.result, this.#context.key);
        state.entered(index, 'SUCCESS', entry.attempt);
        state.completed(index, entry.result, revealed.ok ? revealed.value : undefined, revealed.ok);
        continue;
      }
      state.entered(index, entry.state, entry.attempt);
      if (entry.state === 'FAILURE' && entry.failure) state.failed(entry.failure);
      else if (entry.state === 'REVERTED')
        state.revertEnded({ task: atom.name, state: 'REVERTED' });
      else if (entry.state === 'REVERT_FAILURE' && entry.failure) {
        state.revertEnded({ task: atom.name, state: 'REVERT_FAILURE', failure: entry.failure });
      }
    }
  }

  /**
   * Appends what is held, then `entries`, in one write (creating the flow first when it is new),
   * made durable by the log; then emits the held entries' events.
   */
  #append(entries: LogEntry[], update: { state?: FlowState; token: bigint | null }): Promise<void> {
    const held = this.#held;
    const create = this.#create;
    if (held.length === 0 && create === undefined)
      return this.#context.log.append(this.flowId, entries, update);
    let all = entries;
    if (held.length > 0) {
      this.#held = NOTHING_HELD;
      all = new Array<LogEntry>(held.length + entries.length);
      for (let k = 0; k < held.length; k++) all[k] = held[k]!.entry;
      for (let k = 0; k < entries.length; k++) all[held.length + k] = entries[k]!;
    }
    let written: Promise<void>;
    if (create !== undefined) {
      this.#create = undefined;
      const { record, entry } = create;
      if (update.state) record.state = update.state;
      if (all.length > 0) record.updatedAt = all[all.length - 1]!.at;
      written = this.#context.log
        .create(record, [entry, ...all])
        .then(() => this.#emitFlow('RUNNING', entry.at));
    } else written = this.#context.log.append(this.flowId, all, update);
    if (held.length === 0) return written;
    if (written === SETTLED) {
      this.#emitHeld(held);
      return SETTLED;
    }
    return written.then(() => this.#emitHeld(held));
  }

  /**
   * Holds `h` for the next append. The first one held gets an array of its own, of its size: most
   * appends carry one held entry (a linear flow's SUCCESS with the next RUNNING), and an array
   * grown by `push` from empty reserves room for 17.
   */
  #hold(h: Held): void {
    if (this.#held.length === 0) this.#held = [h];
    else (this.#held as Held[]).push(h);
  }

  #emitHeld(held: readonly Held[]): void {
    for (const { index, entry, result } of held)
      this.#emitTask(index, entry, entry.state === 'SUCCESS', result);
  }

  /** The entry of a transition of the flow itself, now. */
  #flowEntry(state: FlowState): LogEntry {
    return {
      seq: ++this.#seq,
      task: null,
      state,
      at: this.#context.clock.now(),
      token: this.#token,
    };
  }

  /** The entry of a transition of atom `index` (its current attempt, now). */
  #entry(index: number, state: TaskState): LogEntry {
    return {
      seq: ++this.#seq,
      task: this.#context.compiled.atoms[index]!.name,
      state,
      attempt: this.#state.attempt(index),
      at: this.#context.clock.now(),
      token: this.#token,
    };
  }

  #sensitive(index: number): boolean {
    const atom = this.#context.compiled.atoms[index]!;
    if (atom.task.sensitive === true) return true;
    const symbols = this.#context.symbols;
    for (const symbol of atom.provides) if (symbols.has(symbol)) return true;
    return false;
  }

  #entered(index: number, entry: LogEntry): void {
    this.#state.entered(index, entry.state);
    this.#emitTask(index, entry, false, undefined);
  }

  #emitTask(index: number, entry: LogEntry, hasResult: boolean, result: unknown): void {
    const events = this.#context.events;
    if (!events.hasListeners('task:state')) return;
    const atom = this.#context.compiled.atoms[index]!;
    const event: TaskStateEvent = {
      flowId: this.flowId,
      flow: this.#context.compiled.root.name,
      task: atom.name,
      state: entry.state,
      attempt: entry.attempt!,
      at: entry.at,
    };
    if (hasResult) event.result = this.#sensitive(index) ? REDACTED : result;
    if (entry.failure) event.failure = entry.failure;
    events.emit('task:state', event);
  }

  #emitFlow(state: FlowState, at: number, failure?: TaskFailure): void {
    const events = this.#context.events;
    if (!events.hasListeners('flow:state')) return;
    const e: FlowStateEvent = {
      flowId: this.flowId,
      flow: this.#context.compiled.root.name,
      state,
      at,
    };
    if (failure) e.failure = failure;
    events.emit('flow:state', e);
  }
}
