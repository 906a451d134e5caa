import type { JsonObject, Lease, Logger } from '@rigging/core';
import { TasksError, type TaskFailure } from './errors.js';
import type { RetryController } from './retry.js';

/** What `execute` and `revert` receive besides their inputs. */
export interface TaskContext {
  /** Aborts when the flow is cancelled; pass it on to whatever the task waits for. */
  readonly signal: AbortSignal;
  /** The engine's logger, as a child bound to `flowId` and `task`. */
  readonly logger: Logger;
  /** The id of the running flow. */
  readonly flowId: string;
  /** The task's name. */
  readonly task: string;
  /** The attempt, from 1 (retries increase it; it continues after a resume). */
  readonly attempt: number;
  /** The parameter set of an `alternatives` controller for this attempt. */
  readonly params: JsonObject | undefined;
  /**
   * The lease the flow runs under: the engine's lock on it when the engine has a `locks`
   * provider, or the caller's lease (`run({ lease })`, e.g. a queue's claim); `undefined`
   * without either. Pass `lease.token` to every write the task makes to a resource that a later
   * owner may also write, and let the resource refuse a token lower than the highest it saw: a
   * paused owner that lost the flow can then no longer overwrite its successor's work. Write the
   * token as a decimal string where JSON is needed (`String(token)`, read back with `BigInt(s)`).
   * `lease.lost` aborts when the engine loses the flow.
   */
  readonly lease: TaskLease | undefined;
  /**
   * For a task defined with `transaction: true`: runs `work` in one transaction of the task log's
   * database (with `@rigging/tasks/sql`, a Kysely transaction — `sqlTransaction(ctx, work)`
   * types it) and commits it together with the task's SUCCESS, whose result is what `work`
   * returns; resolves with that result once committed. Call it at most once, as the attempt's
   * last step. `undefined` for every other task, and in `revert`.
   */
  readonly transaction:
    (<T>(work: (transaction: unknown) => T | Promise<T>) => Promise<T>) | undefined;
}

/** The lease a flow runs under, as a task sees it: read-only (its holder releases it). */
export interface TaskLease {
  /** The lock key (`lockPrefix` + flow id), or the caller's lease key (a queue claim: the op's key). */
  readonly key: Lease['key'];
  /** The fencing token of this grant: strictly increasing per key across owners. */
  readonly token: Lease['token'];
  /** Aborts when the engine loses the lease (expired, session gone); the flow stops at the next task boundary. */
  readonly lost: Lease['lost'];
}

/** What `revert` receives. */
export interface RevertArgs<I, R> {
  /** The task's own stored result (read back from the log after a restart). */
  result: R;
  /** The failure that caused the rollback. */
  failure: TaskFailure | undefined;
  /** The task's inputs, as `execute` received them. */
  inputs: I;
}

/** Symbols a task provides: one name (bound to the whole result) or several (keys of the result). */
export type Provides = string | readonly string[];

type ProvidedOf<P, R> = [P] extends [string]
  ? string extends P
    ? Record<string, unknown>
    : { [K in P]: R }
  : [P] extends [readonly (infer K extends string)[]]
    ? { [Q in K]: R extends Record<Q, infer V> ? V : unknown }
    : // eslint-disable-next-line @typescript-eslint/no-empty-object-type
      {};

/** The definition given to {@link task}. */
export interface TaskSpec<Req extends string, I, R, P extends Provides | undefined> {
  /** Unique within a flow; recorded in the log. */
  name: string;
  /** Recorded in the log. A different major (the part before the first dot) is incompatible on resume. @default 1 */
  version?: string | number;
  /** Symbols taken from flow inputs or upstream `provides`. @default [] */
  requires?: readonly Req[];
  /** Symbols this task's result is bound to. */
  provides?: P;
  /** Does the work; the result must be JSON and is stored in the log before anything else starts. */
  execute(ctx: TaskContext, inputs: I): R | Promise<R>;
  /** Undoes the work; receives the stored result and the failure that caused the rollback. Must be idempotent. */
  revert?(ctx: TaskContext, args: RevertArgs<I, R>): unknown;
  /** Decides about retries when `execute` throws. @default no retry */
  retry?: RetryController;
  /**
   * Never store in clear: `true` (the result and every input) or the names of sensitive inputs or
   * provided symbols. Redacted, or encrypted when the engine has a `secretKey`.
   */
  sensitive?: boolean | readonly string[];
  /**
   * The task's effects are writes to the task log's database, made through
   * `ctx.transaction(work)`: `work` runs in one transaction committed with the task's SUCCESS
   * (and, when it is the flow's first write or last task, with the flow's creation or end). The
   * writes happen exactly once, and the task costs one commit instead of two (no RUNNING entry is
   * written for it: nothing of it is left when it does not commit). Anything else it does is
   * neither recorded nor reverted and may run again (a crash, a failed attempt): keep it free of
   * effects (waiting, reading, computing). Needs a log that offers transactions (`sqlLog`);
   * `tasks.transaction_unsupported` otherwise. `revert` runs outside any transaction, as for
   * every task. @default false
   */
  transaction?: boolean;
}

/** A task: the atom of a flow. `I` are the inputs it needs, `O` the symbols it provides. */
export interface Task<I = any, O = any> {
  /** Discriminates a task from a {@link Flow}. */
  readonly kind: 'task';
  /** Unique within a flow; recorded in the log. */
  readonly name: string;
  /** The spec's `version` as a string (`'1'` when omitted). */
  readonly version: string;
  /** Symbols taken from flow inputs or upstream `provides`. */
  readonly requires: readonly string[];
  /** Symbols the result is bound to; `undefined` when the task provides nothing. */
  readonly provides: Provides | undefined;
  /** Decides about retries when `execute` throws; `undefined`: no retry. */
  readonly retry: RetryController | undefined;
  /** What is never stored in clear (see {@link TaskSpec.sensitive}); `false` when omitted. */
  readonly sensitive: boolean | readonly string[];
  /** Whether `execute` runs in a transaction of the log, committed with its SUCCESS (see {@link TaskSpec.transaction}). */
  readonly transaction: boolean;
  /** The spec's `execute`. */
  readonly execute: (ctx: TaskContext, inputs: any) => unknown;
  /** The spec's `revert`; `undefined` when the task has nothing to undo. */
  readonly revert: ((ctx: TaskContext, args: RevertArgs<any, any>) => unknown) | undefined;
  /** Phantom types (never set). */
  readonly __types?: {
    /** The inputs the task needs. */
    in: I;
    /** The symbols the task provides. */
    out: O;
  };
}

const NAME = /^[^\s][^\n]{0,199}$/;

/** @internal A task or flow name (≤ 200 chars, no newline, not starting with whitespace); a `TypeError` otherwise. */
export function checkName(what: string, name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new TypeError(
      `${what} name must be a non-empty string (≤ 200 chars), got ${JSON.stringify(name)}`,
    );
  }
  return name;
}

/**
 * Defines a task. Types flow from `provides` (and the result type) to the flow's outputs and
 * from `requires` (and the `inputs` annotation of `execute`) to the flow's inputs.
 */
export function task<
  const Req extends string = never,
  I extends { [K in Req]: unknown } = { [K in Req]: unknown },
  R = unknown,
  const P extends Provides | undefined = undefined,
>(spec: TaskSpec<Req, I, R, P>): Task<Pick<I, Req>, ProvidedOf<P, Awaited<R>>> {
  if (!spec || typeof spec !== 'object') throw new TypeError('task(spec): spec must be an object');
  const name = checkName('task', spec.name);
  if (typeof spec.execute !== 'function') {
    throw new TypeError(`task '${name}': execute must be a function`);
  }
  if (spec.revert !== undefined && typeof spec.revert !== 'function') {
    throw new TypeError(`task '${name}': revert must be a function`);
  }
  const requires: string[] = [...(spec.requires ?? [])];
  for (const r of requires) {
    if (typeof r !== 'string' || !r)
      throw new TypeError(
        `task '${name}': requires must list non-empty strings, got ${JSON.stringify(r)}`,
      );
  }
  const provides = spec.provides;
  if (provides !== undefined) {
    const list = typeof provides === 'string' ? [provides] : provides;
    if (!Array.isArray(list) && typeof provides !== 'string') {
      throw new TypeError(`task '${name}': provides must be a string or an array of strings`);
    }
    for (const p of list) {
      if (typeof p !== 'string' || !p)
        throw new TypeError(
          `task '${name}': provides must list non-empty strings, got ${JSON.stringify(p)}`,
        );
      if (requires.includes(p)) {
        throw new TasksError(
          'tasks.invalid_flow',
          `task '${name}' both requires and provides '${p}'`,
          {
            details: { task: name, symbol: p },
          },
        );
      }
    }
  }
  if (spec.transaction !== undefined && typeof spec.transaction !== 'boolean') {
    throw new TypeError(`task '${name}': transaction must be a boolean`);
  }
  const version = spec.version === undefined ? '1' : String(spec.version);
  if (!/^[0-9A-Za-z][0-9A-Za-z._-]*$/.test(version)) {
    throw new TypeError(
      `task '${name}': version must look like 1 or "2.1", got ${JSON.stringify(spec.version)}`,
    );
  }
  const t: Task = {
    kind: 'task',
    name,
    version,
    requires,
    provides: typeof provides === 'string' ? provides : provides ? [...provides] : undefined,
    retry: spec.retry,
    sensitive: spec.sensitive ?? false,
    transaction: spec.transaction ?? false,
    execute: spec.execute as Task['execute'],
    revert: spec.revert as Task['revert'],
  };
  return Object.freeze(t) as Task<Pick<I, Req>, ProvidedOf<P, Awaited<R>>>;
}
