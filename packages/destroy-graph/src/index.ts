export { ObjectGraph } from './graph.js';
export { diff } from './snapshot.js';
export type {
  AddOptions,
  CollectOptions,
  DestroyOptions,
  DestroyReport,
  Explanation,
  GraphSnapshot,
  ObjectGraphOptions,
  Pin,
  RunFailure,
  TypeDefinition,
} from './types.js';
export { DestructionPlan } from './plan.js';
export type { EdgeReason, PlanCycle, PlanEdge, PlanJSON } from './plan.js';
export type {
  DestroyContext,
  DestroyFn,
  DestructionHandler,
  GraphObject,
  NotifyContext,
  ReferenceKind,
} from './node.js';
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
