export { DestructionPlan, ObjectGraph } from './graph.js';
export type {
  AddOptions,
  DestroyContext,
  DestroyFn,
  DestructionHandler,
  GraphObject,
  NotifyContext,
  ObjectGraphOptions,
  Pin,
  TypeDefinition,
} from './graph.js';
export { diff } from './snapshot.js';
export type {
  CollectOptions,
  DestroyOptions,
  DestroyReport,
  Explanation,
  GraphSnapshot,
  ReferenceKind,
  RunFailure,
} from './types.js';
export type { EdgeReason, PlanCycle, PlanEdge, PlanJSON } from './plan.js';
export type { DestroyGraphEvents, RunStatus } from './events.js';
export { DestroyGraphError } from './errors.js';
export type { DestroyGraphErrorCode } from './errors.js';
export {
  subscribeDestruction,
  unsubscribeDestruction,
  isDoomed,
  isDestroyed,
  explain,
} from './functions.js';
