// The types every layer of the package shares. This module imports none of the others: the
// public graph (`graph.ts`) sits on top, the store, planner, run and snapshot below it, and what
// the lower layers need from an object or a function of the user is described here.
import type { Json, SerializedError } from '@rigging/core';
import type { RunStatus } from './events.js';

/** How a reference keeps its target alive: `persistent` (In/Out/InOut) or `runtime` (Runtime, undeclared). */
export type ReferenceKind = 'persistent' | 'runtime';

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
  /** The object being destroyed (the publisher, for `notify`). */
  id: string;
  /** Which step failed: a subscriber's handler (`notify`) or a destroy function (`destroy`). */
  step: 'notify' | 'destroy';
  /** The subscriber whose handler failed (`notify` only). */
  subscriber?: string;
  /** True when the function's `timeoutMs` elapsed. */
  timedOut: boolean;
  /** What was thrown, serialized. */
  error: SerializedError;
}

/** What a run did. Run the same plan again to resume: destroyed objects are skipped. */
export interface DestroyReport {
  /** The run's number (1, 2, … per graph), as in its events. */
  runId: number;
  /** `completed`, `stopped` (the `stop` policy after a failure) or `aborted` (the signal). */
  status: RunStatus;
  /** Destroyed by this run, in completion order. */
  destroyed: string[];
  /** Every failure of the run, in the order they happened. */
  failed: RunFailure[];
  /** Not destroyed (not attempted, failed, or interrupted). */
  pending: string[];
  /** Destroyed but reachable again: kept in the graph, marked destroyed. */
  resurrected: string[];
  /** Destroyed and unreachable: removed from the graph. */
  dropped: string[];
}

/** Why an object is (not) going to be destroyed. */
export interface Explanation {
  /** The object's id. */
  id: string;
  /** The object's type. */
  type: string;
  /** `live`, `doomed` (planned for destruction) or `destroyed`. */
  state: 'live' | 'doomed' | 'destroyed';
  /** True when the object is a root. */
  root: boolean;
  /** True when a static property of a type refers to it. */
  static: boolean;
  /** How many pins hold it now. */
  pins: number;
  /** Reachable through persistent references from roots and statics. */
  persistentlyReachable: boolean;
  /** Reachable through any reference from roots, statics and pins. */
  reachable: boolean;
  /** A shortest path (ids, root first) that keeps it alive, if any. */
  path: string[] | null;
  /** Direct references to it. */
  referencedBy: Array<{
    /** The referring object's id. */
    id: string;
    /** The referring property. */
    property: string;
    /** The property's reference kind. */
    kind: ReferenceKind;
  }>;
  /** Collected by `collect({ scope })` for these scopes. */
  collectedBy: Array<'persistent' | 'complete'>;
  /** Objects it must be destroyed after (owned objects, publishers it depends on). */
  after: Array<{
    /** The other object's id. */
    id: string;
    /** This object owns it, or depends on it (subscribed to its destruction). */
    reason: 'owns' | 'depends on';
  }>;
  /** Objects that must be destroyed after it (owner, subscribers). */
  before: Array<{
    /** The other object's id. */
    id: string;
    /** This object is owned by it, or it depends on this object. */
    reason: 'owned by' | 'dependency of';
  }>;
  /** The same, in a sentence or two. */
  text: string;
}

/** The JSON form of a graph ({@link ObjectGraph.serialize}). */
export interface GraphSnapshot {
  /** Identifies the format. */
  format: 'rigging.destroy-graph';
  /** Version of the format. */
  version: 1;
  /** Every object in the graph. */
  objects: Array<{
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
    /** The owner's id; absent for an object without owner. */
    owner?: string;
    /** The value as JSON (through the type's `toJSON`, if any); absent when `undefined`. */
    value?: Json;
    /** Present when the object is marked destroyed. */
    destroyed?: true;
    /** References by property name; absent when the object has none. */
    props?: Record<
      string,
      {
        /** The property's reference kind. */
        kind: ReferenceKind;
        /** The target id, the target ids of a list property, or `null`. */
        to: string | string[] | null;
      }
    >;
  }>;
  /** Root ids, an id repeated once per root count. */
  roots: string[];
  /** Static properties of types ({@link ObjectGraph.setStatic}). */
  statics: Array<{
    /** The type the property belongs to. */
    type: string;
    /** The property's name. */
    name: string;
    /** The target's id. */
    to: string;
  }>;
  /** Destruction dependencies ({@link ObjectGraph.subscribeDestruction}). */
  subscriptions: Array<{
    /** The publisher's id. */
    publisher: string;
    /** The subscriber's id. */
    subscriber: string;
    /** How many subscribes are not yet matched by an unsubscribe. */
    count: number;
    /** The name of the subscriber type's handler; absent for a function handler or none. */
    handler?: string;
  }>;
}

/**
 * @internal An object as the layers under the public graph see it (the store, the planner, a
 * run, snapshots). `Node`, the implementation of {@link GraphObject}, is the only one.
 */
export interface Handle {
  readonly id: string;
  readonly type: string;
  readonly value: unknown;
  /** Index in the graph's store; -1 once the object left the graph. */
  index: number;
  /** Direct owner, or `null`. */
  readonly owner: Handle | null;
  /** Its own destroy function (`add`'s `destroy` option). */
  readonly destroyFn: DestroyCall | undefined;
}

/** @internal What a run gives a destroy function or a handler (a `DestroyContext`). */
export interface CallContext {
  readonly signal: AbortSignal;
  /** The graph, passed through as is. */
  readonly graph: object;
  readonly group: number;
}

/** @internal A destroy function as a run calls it (a `DestroyFn`). */
export type DestroyCall = (object: Handle, context: CallContext) => void | Promise<void>;

/** @internal A destruction handler as a run calls it (a `DestructionHandler`). */
export type NotifyCall = (
  publisher: Handle,
  context: CallContext & { readonly subscriber: Handle },
) => void | Promise<void>;

/** @internal A type as the registry keeps it (a `TypeDefinition`). */
export interface TypeSpec {
  extends?: string;
  properties?: Record<string, ReferenceKind>;
  destroy?: DestroyCall;
  handlers?: Record<string, NotifyCall>;
  toJSON?: (value: unknown) => Json;
  fromJSON?: (json: Json) => unknown;
}
