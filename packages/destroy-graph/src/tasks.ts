/**
 * `@rigging/destroy-graph/tasks`: a destruction plan as a durable `@rigging/tasks` flow, so a
 * teardown that crashes half-way resumes where it stopped instead of starting over.
 * @packageDocumentation
 */
import {
  linearFlow,
  task,
  unorderedFlow,
  type Flow,
  type Node,
  type RetryController,
  type TaskContext,
} from '@rigging/tasks';
import { DestroyGraphError } from './errors.js';
import type { DestructionPlan } from './graph.js';
import type { PlanJSON } from './plan.js';

/** One object of the plan, as a teardown task sees it. */
export interface PlannedObject {
  /** The object's id. */
  readonly id: string;
  /** The object's type. */
  readonly type: string;
  /** The plan group it is destroyed in (0 first). */
  readonly group: number;
}

/** A step of a teardown flow: notify or destroy one object. */
export type TeardownStep = (object: PlannedObject, context: TaskContext) => unknown;

/** Options of {@link teardownFlow}. */
export interface TeardownFlowOptions {
  /**
   * The flow's name (and version), recorded in the task log; `resume` refuses a log written by
   * a flow of another name or major version. @default 'teardown'
   */
  name?: string | { name: string; version?: string | number };
  /**
   * Destroys one object. Runs once per object, in the plan's order: every object of group `i`
   * is destroyed before any of group `i + 1`; the objects of a group run in parallel up to the
   * engine's `concurrency`. Must be idempotent: the one in flight when a process dies runs again
   * when the flow resumes. Its result (JSON) is recorded in the task log.
   */
  destroy: TeardownStep;
  /**
   * Notifies one object's subscribers that it is about to be destroyed. When given, every
   * object is notified before any is destroyed, groups in reverse order (the last group
   * first), as `graph.destroy` does. Idempotent, like `destroy`.
   */
  notify?: TeardownStep;
  /** A retry controller for every step (e.g. `times(3, 100)` from `@rigging/tasks`). */
  retry?: RetryController;
}

function invalidPlan(why: string): DestroyGraphError {
  return new DestroyGraphError('destroy-graph.invalid_plan', `invalid destruction plan: ${why}`);
}

/** The plan's groups of objects, checked: a plan from another process arrives as JSON. */
function plannedGroups(plan: DestructionPlan | PlanJSON): PlannedObject[][] {
  const json: PlanJSON | undefined =
    plan && typeof (plan as DestructionPlan).toJSON === 'function'
      ? (plan as DestructionPlan).toJSON()
      : (plan as PlanJSON | undefined);
  if (json?.format !== 'rigging.destroy-plan' || json.version !== 1) {
    throw invalidPlan(
      'expected a DestructionPlan or its JSON (format rigging.destroy-plan, version 1)',
    );
  }
  if (!Array.isArray(json.groups)) throw invalidPlan('groups must be an array');
  const seen = new Set<string>();
  return json.groups.map((group, index) => {
    if (!Array.isArray(group?.objects)) throw invalidPlan(`group ${index} has no objects array`);
    return group.objects.map((object) => {
      const id: unknown = object?.id;
      const type: unknown = object?.type;
      if (typeof id !== 'string' || id === '' || typeof type !== 'string') {
        throw invalidPlan(`group ${index} has an object without a string id and type`);
      }
      if (seen.has(id)) throw invalidPlan(`object ${JSON.stringify(id)} is planned twice`);
      seen.add(id);
      return { id, type, group: index };
    });
  });
}

function stepTask(kind: 'destroy' | 'notify', object: PlannedObject, options: TeardownFlowOptions) {
  const run = kind === 'destroy' ? options.destroy : options.notify!;
  return task({
    name: `${kind} ${object.id}`,
    ...(options.retry ? { retry: options.retry } : {}),
    execute: (context) => run(object, context),
  });
}

/**
 * A destruction plan as a `@rigging/tasks` flow: one task per object (`destroy <id>`, and
 * `notify <id>` when `notify` is given), the plan's groups one after the other, the objects of
 * a group in parallel. Run it with an `Engine` over a durable log (`@rigging/tasks/sql`); after
 * a crash, build the flow again from the same plan (keep `JSON.stringify(plan)`) and call
 * `engine.resume(flowId, flow)`: objects already destroyed are not destroyed again.
 *
 * The flow destroys; it does not undo: a step that fails (after its retries) fails the flow, and
 * the engine's rollback has nothing to revert, so the objects destroyed so far stay destroyed.
 * @throws DestroyGraphError `destroy-graph.invalid_plan` for a plan JSON that is malformed.
 * @throws TypeError when `destroy` (or a given `notify`) is not a function.
 */
export function teardownFlow(plan: DestructionPlan | PlanJSON, options: TeardownFlowOptions): Flow {
  if (typeof options?.destroy !== 'function') {
    throw new TypeError(`teardownFlow: destroy must be a function, got ${typeof options?.destroy}`);
  }
  if (options.notify !== undefined && typeof options.notify !== 'function') {
    throw new TypeError(`teardownFlow: notify must be a function, got ${typeof options.notify}`);
  }
  const groups = plannedGroups(plan).filter((group) => group.length > 0);
  const phase = (kind: 'destroy' | 'notify', ordered: PlannedObject[][]): Node[] =>
    ordered.map((group) =>
      unorderedFlow(
        `${kind} group ${group[0]!.group}`,
        ...group.map((object) => stepTask(kind, object, options)),
      ),
    );
  const children: Node[] = [];
  if (options.notify)
    children.push(linearFlow('notify', ...phase('notify', [...groups].reverse())));
  children.push(linearFlow('destroy', ...phase('destroy', groups)));
  const name = options.name ?? 'teardown';
  return linearFlow(
    typeof name === 'string' ? name : { name: name.name, version: name.version ?? 1 },
    ...children,
  );
}
