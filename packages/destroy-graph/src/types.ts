import type { Clock, Json, SerializedError } from '@rigging/core';
import type { RunStatus } from './events.js';
import type { DestroyFn, DestructionHandler, GraphObject, ReferenceKind } from './node.js';

/** A type of objects: declared properties (with their reference kind), destroy function, handlers. */
export interface TypeDefinition<V = any> {
  /** Parent type: its properties, handlers and destroy function are inherited. */
  extends?: string;
  /** Declared properties. Undeclared properties are `runtime` references. */
  properties?: Record<string, ReferenceKind>;
  /**
   * Releases the object's resources. Along the `extends` chain every type's destroy runs, the
   * most derived first.
   */
  destroy?: DestroyFn<V>;
  /** Named destruction handlers, for subscriptions that survive serialization. */
  handlers?: Record<string, DestructionHandler>;
  /** Turns a value into JSON for {@link ObjectGraph.serialize} (default: the value, which must be JSON). */
  toJSON?: (value: V) => Json;
  /** Rebuilds a value in {@link ObjectGraph.deserialize} (default: the JSON as is). */
  fromJSON?: (json: Json) => V;
}

/** Options of {@link ObjectGraph.add}. */
export interface AddOptions<V> {
  /** Unique id. @default `${type}-${n}` */
  id?: string;
  type: string;
  /** The owner (an object or its id). Ownership is a tree and does not change. @default null */
  owner?: GraphObject | string | null;
  value?: V;
  /** Makes the object a root. @default false */
  root?: boolean;
  /** An extra destroy function for this object only, run after its types' ones. */
  destroy?: DestroyFn<V>;
}

/** Options of {@link ObjectGraph.collect}. */
export interface CollectOptions {
  /**
   * `persistent`: reachable from roots and statics through persistent references only (the
   * post-deployment collection). `complete`: through every reference, and pins count as roots
   * (the on-demand collection). @default 'complete'
   */
  scope?: 'persistent' | 'complete';
}

/** Options of {@link ObjectGraph.destroy}. */
export interface DestroyOptions {
  /** Most destroy functions (and handlers) running at once within a group. @default 16 */
  concurrency?: number;
  /** Stops the run: nothing new starts, running functions see their signal aborted. */
  signal?: AbortSignal;
  /**
   * When a destroy function or handler throws: `stop` lets the current group finish, then stops
   * (later groups stay pending; run the same plan again to resume); `continue` carries on.
   * @default 'stop'
   */
  policy?: 'stop' | 'continue';
  /** Per object (and per handler) time limit; the function's signal aborts when it elapses. */
  timeoutMs?: number;
}

/** One failure of a run. */
export interface RunFailure {
  id: string;
  step: 'notify' | 'destroy';
  subscriber?: string;
  timedOut: boolean;
  error: SerializedError;
}

/** What a run did. Run the same plan again to resume: destroyed objects are skipped. */
export interface DestroyReport {
  runId: number;
  status: RunStatus;
  /** Destroyed by this run, in completion order. */
  destroyed: string[];
  failed: RunFailure[];
  /** Not destroyed (not attempted, failed, or interrupted). */
  pending: string[];
  /** Destroyed but reachable again: kept in the graph, marked destroyed. */
  resurrected: string[];
  /** Destroyed and unreachable: removed from the graph. */
  dropped: string[];
}

/** A pin: the object counts as referenced from a stack frame while the pin is held. */
export interface Pin extends Disposable, AsyncDisposable {
  readonly object: GraphObject;
  /** Idempotent. */
  release(): void;
}

/** Why an object is (not) going to be destroyed. */
export interface Explanation {
  id: string;
  type: string;
  state: 'live' | 'doomed' | 'destroyed';
  root: boolean;
  static: boolean;
  pins: number;
  /** Reachable through persistent references from roots and statics. */
  persistentlyReachable: boolean;
  /** Reachable through any reference from roots, statics and pins. */
  reachable: boolean;
  /** A shortest path (ids, root first) that keeps it alive, if any. */
  path: string[] | null;
  /** Direct references to it. */
  referencedBy: Array<{ id: string; property: string; kind: ReferenceKind }>;
  /** Collected by `collect({ scope })` for these scopes. */
  collectedBy: Array<'persistent' | 'complete'>;
  /** Objects it must be destroyed after (owned objects, publishers it depends on). */
  after: Array<{ id: string; reason: 'owns' | 'depends on' }>;
  /** Objects that must be destroyed after it (owner, subscribers). */
  before: Array<{ id: string; reason: 'owned by' | 'dependency of' }>;
  /** The same, in a sentence or two. */
  text: string;
}

/** The JSON form of a graph ({@link ObjectGraph.serialize}). */
export interface GraphSnapshot {
  format: 'rigging.destroy-graph';
  version: 1;
  objects: Array<{
    id: string;
    type: string;
    owner?: string;
    value?: Json;
    destroyed?: true;
    props?: Record<string, { kind: ReferenceKind; to: string | string[] | null }>;
  }>;
  roots: string[];
  statics: Array<{ type: string; name: string; to: string }>;
  subscriptions: Array<{ publisher: string; subscriber: string; count: number; handler?: string }>;
}

/** Options of the {@link ObjectGraph} constructor and {@link ObjectGraph.deserialize}. */
export interface ObjectGraphOptions {
  /** Types to define up front. */
  types?: Record<string, TypeDefinition>;
  /** Where run durations (`destroy:destroyed`'s `durationMs`) are read from. @default systemClock */
  clock?: Clock;
}
