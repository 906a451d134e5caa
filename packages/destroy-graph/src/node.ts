import type { ObjectGraph } from './graph.js';

/** How a reference keeps its target alive: `persistent` (In/Out/InOut) or `runtime` (Runtime, undeclared). */
export type ReferenceKind = 'persistent' | 'runtime';

/** Context given to destroy functions. */
export interface DestroyContext {
  /** Aborts when the run is aborted or this object's `timeoutMs` elapses. */
  readonly signal: AbortSignal;
  readonly graph: ObjectGraph;
  /** Index of the plan group being destroyed. */
  readonly group: number;
}

/** Context given to destruction handlers. */
export interface NotifyContext {
  /** The object that subscribed (the one whose handler runs). */
  readonly subscriber: GraphObject;
  readonly signal: AbortSignal;
  readonly graph: ObjectGraph;
  /** Index of the publisher's plan group. */
  readonly group: number;
}

/** Releases an object's resources; runs once, in plan order. */
export type DestroyFn<V = unknown> = (
  object: GraphObject<V>,
  context: DestroyContext,
) => void | Promise<void>;

/** Called on a subscriber when one of its publishers is about to be destroyed. */
export type DestructionHandler = (
  publisher: GraphObject,
  context: NotifyContext,
) => void | Promise<void>;

/** An object of an {@link ObjectGraph}. Handles are stable: the same object is always the same handle. */
export interface GraphObject<V = unknown> {
  readonly id: string;
  /** Type name (see {@link ObjectGraph.defineType}). */
  readonly type: string;
  /** The application's value for this object (any value; JSON or a type's `toJSON` to serialize). */
  readonly value: V;
  /** Direct owner, or `null` (ownership is a tree). */
  readonly owner: GraphObject | null;
  readonly graph: ObjectGraph;
}

/** @internal one destruction dependency: `subscriber` depends on `publisher`. */
export interface Subscription {
  readonly publisher: Node;
  readonly subscriber: Node;
  count: number;
  handler: DestructionHandler | string | undefined;
}

/** @internal one property slot. */
export interface Slot {
  kind: ReferenceKind;
  list: boolean;
  targets: Node[];
}

/** @internal the implementation of {@link GraphObject}; fields beyond the interface are private to the package. */
export class Node<V = unknown> implements GraphObject<V> {
  readonly id: string;
  readonly type: string;
  value: V;
  owner: Node | null;
  readonly graph: ObjectGraph;
  readonly seq: number;
  props: Map<string, Slot> | null = null;
  /** Subscriptions where this object is the subscriber (it depends on the publisher). */
  publishers: Map<Node, Subscription> | null = null;
  /** Subscriptions where this object is the publisher. */
  subscribers: Map<Node, Subscription> | null = null;
  destroyFn: DestroyFn<V> | undefined;
  pins = 0;
  roots = 0;
  statics = 0;
  destroyed = false;
  doomed = false;
  removed = false;
  mark = 0;
  idxStamp = 0;
  idx = -1;

  constructor(
    graph: ObjectGraph,
    id: string,
    type: string,
    value: V,
    owner: Node | null,
    seq: number,
    destroyFn: DestroyFn<V> | undefined,
  ) {
    this.graph = graph;
    this.id = id;
    this.type = type;
    this.value = value;
    this.owner = owner;
    this.seq = seq;
    this.destroyFn = destroyFn;
  }

  toJSON(): { id: string; type: string } {
    return { id: this.id, type: this.type };
  }
}
