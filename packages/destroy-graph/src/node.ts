import type { ObjectGraph } from './graph.js';
import type { Store } from './store.js';

/** How a reference keeps its target alive: `persistent` (In/Out/InOut) or `runtime` (Runtime, undeclared). */
export type ReferenceKind = 'persistent' | 'runtime';

/** Context given to destroy functions. */
export interface DestroyContext {
  /** Aborts when the run is aborted or this object's `timeoutMs` elapses. */
  readonly signal: AbortSignal;
  /** The graph the object belongs to. */
  readonly graph: ObjectGraph;
  /** Index of the plan group being destroyed. */
  readonly group: number;
}

/** Context given to destruction handlers. */
export interface NotifyContext {
  /** The object that subscribed (the one whose handler runs). */
  readonly subscriber: GraphObject;
  /** Aborts when the run is aborted or this handler's `timeoutMs` elapses. */
  readonly signal: AbortSignal;
  /** The graph both objects belong to. */
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
  /** Unique within its graph. */
  readonly id: string;
  /** Type name (see {@link ObjectGraph.defineType}). */
  readonly type: string;
  /** The application's value for this object (any value; JSON or a type's `toJSON` to serialize). */
  readonly value: V;
  /** Direct owner, or `null` (ownership is a tree). */
  readonly owner: GraphObject | null;
  /** The graph the object belongs to. */
  readonly graph: ObjectGraph;
}

/**
 * @internal the implementation of {@link GraphObject}: a small handle. Everything else about the
 * object (owner, flags, counters, properties, dependencies) lives in its graph's {@link Store} at
 * `index` (-1 once the object left the graph).
 */
export class Node<V = unknown> implements GraphObject<V> {
  readonly id: string;
  readonly type: string;
  value: V;
  readonly graph: ObjectGraph;
  readonly #store: Store;
  /** Index in the graph's store; -1 once removed. */
  index = -1;
  destroyFn: DestroyFn<V> | undefined;

  constructor(
    graph: ObjectGraph,
    store: Store,
    id: string,
    type: string,
    value: V,
    destroyFn: DestroyFn<V> | undefined,
  ) {
    this.graph = graph;
    this.#store = store;
    this.id = id;
    this.type = type;
    this.value = value;
    this.destroyFn = destroyFn;
  }

  /** Direct owner, or `null` (also once the owner left the graph). */
  get owner(): Node | null {
    if (this.index < 0) return null;
    const owner = this.#store.ownerOf(this.index);
    return owner >= 0 ? this.#store.nodes[owner]! : null;
  }

  get removed(): boolean {
    return this.index < 0;
  }

  toJSON(): { id: string; type: string } {
    return { id: this.id, type: this.type };
  }
}
