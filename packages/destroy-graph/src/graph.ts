import {
  TypedEmitter,
  positiveIntegerOption,
  systemClock,
  throwIfAborted,
  timeoutOption,
} from '@rigging/core';
import type { Clock, Json } from '@rigging/core';
import { compact } from './compact.js';
import { DestroyGraphError } from './errors.js';
import type { DestroyGraphEvents } from './events.js';
import { explainNode } from './explain.js';
import { guardValue } from './guard.js';
import { computeEdges, formatPlan, planToJSON } from './plan.js';
import type { Csr, PlanCycle, PlanEdge, PlanJSON } from './plan.js';
import { PlanScratch, planIndices } from './planner.js';
import { TypeRegistry } from './registry.js';
import { DestroyRun } from './run.js';
import type { RunContext } from './run.js';
import { restoreSnapshot, serializeStore } from './snapshot.js';
import type { SnapshotTarget } from './snapshot.js';
import { DESTROYED, DOOMED, LIST, PERSISTENT, REMOVED, Store } from './store.js';
import type {
  CollectOptions,
  DestroyCall,
  DestroyOptions,
  DestroyReport,
  Explanation,
  GraphSnapshot,
  Handle,
  NotifyCall,
  ReferenceKind,
  TypeSpec,
} from './types.js';

// The public face of the package: the graph, its objects, its plans, and the types that name
// them (they refer to each other, so they live together). Everything under it (store, planner,
// run, snapshot) works on the `Handle` and function shapes of types.ts and never imports this
// module.

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
  /** The object's type (defined with {@link ObjectGraph.defineType} or the `types` option). */
  type: string;
  /** The owner (an object or its id). Ownership is a tree and does not change. @default null */
  owner?: GraphObject | string | null;
  /** The application's value for this object (see {@link GraphObject.value}). @default undefined */
  value?: V;
  /** Makes the object a root. @default false */
  root?: boolean;
  /** An extra destroy function for this object only, run after its types' ones. */
  destroy?: DestroyFn<V>;
}

/** A pin: the object counts as referenced from a stack frame while the pin is held. */
export interface Pin extends Disposable, AsyncDisposable {
  /** The pinned object. */
  readonly object: GraphObject;
  /** Idempotent. */
  release(): void;
}

/** Options of the {@link ObjectGraph} constructor and {@link ObjectGraph.deserialize}. */
export interface ObjectGraphOptions {
  /** Types to define up front. */
  types?: Record<string, TypeDefinition>;
  /** Where run durations (`destroy:destroyed`'s `durationMs`) are read from. @default systemClock */
  clock?: Clock;
}

/**
 * A graph of resource objects: ids, types, an ownership tree, persistent and runtime references,
 * roots, statics and pins; destruction dependencies; collection, planning and the two-step
 * destruction (notify in reverse order, destroy in direct order).
 */
export class ObjectGraph {
  /** Typed events of every step (see {@link DestroyGraphEvents}). */
  readonly events = new TypedEmitter<DestroyGraphEvents>();
  readonly #types = new TypeRegistry();
  readonly #statics = new Map<string, Node>();
  /** Ownership, flags, counters, properties and dependencies of every object, by index. */
  readonly #store = new Store<Node>();
  /** Where plans of this graph build their relation (reused: a plan allocates little). */
  readonly #scratch = new PlanScratch();
  readonly #clock: Clock;
  #added = 0;
  #runs = 0;
  #running = false;

  constructor(options: ObjectGraphOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    for (const [name, definition] of Object.entries(options.types ?? {})) {
      this.defineType(name, definition);
    }
  }

  // ---------------------------------------------------------------- types and objects

  /** Defines (or redefines) a type. */
  defineType<V = any>(name: string, definition: TypeDefinition<V>): void {
    this.#types.define(name, definition as TypeSpec);
  }

  /** Adds an object. */
  add<V = unknown>(options: AddOptions<V>): GraphObject<V> {
    return this.#add(options);
  }

  #add<V>(options: AddOptions<V>): Node<V> {
    const { type } = options;
    if (typeof type !== 'string' || type === '') {
      throw new TypeError(`add: type must be a non-empty string, got ${String(type)}`);
    }
    const id = options.id ?? `${type}-${this.#added + 1}`;
    if (typeof id !== 'string' || id === '')
      throw new TypeError(`add: id must be a non-empty string, got ${String(id)}`);
    const store = this.#store;
    if (store.byId.has(id)) throw new TypeError(`add: an object with id ${id} already exists`);
    const owner = options.owner == null ? null : this.#node(options.owner, 'add: owner');
    this.#added++;
    const node = new Node<V>(this, store, id, type, options.value as V, options.destroy);
    node.index = store.add(node as Node, owner ? owner.index : -1);
    if (options.root) store.count(store.roots, node.index, 1);
    return node;
  }

  /** The object with this id. */
  get(id: string): GraphObject | undefined {
    return this.#store.byId.get(id);
  }

  /** Whether `object` (a handle or an id) is in this graph. */
  has(object: GraphObject | string): boolean {
    const node = typeof object === 'string' ? this.#store.byId.get(object) : object;
    return node instanceof Node && node.graph === this && node.index >= 0;
  }

  /** Number of objects in the graph. */
  get size(): number {
    return this.#store.byId.size;
  }

  /** Every object, in insertion order. */
  objects(): IterableIterator<GraphObject> {
    return this.#store.byId.values();
  }

  /**
   * Sets property `name` of `object` to a reference (or a list, or `null`). Its kind comes from
   * the type's declaration (inherited ones included); undeclared properties are `runtime`
   * unless `kind` says otherwise.
   */
  set(
    object: GraphObject,
    name: string,
    target: GraphObject | readonly GraphObject[] | null,
    options: { kind?: ReferenceKind } = {},
  ): void {
    const node = this.#node(object, 'set');
    const declared = this.#types.declaredKind(node.type, name);
    if (options.kind !== undefined && declared !== undefined && options.kind !== declared) {
      throw new TypeError(`set: ${node.type}.${name} is declared ${declared}, not ${options.kind}`);
    }
    const kind = declared ?? options.kind ?? 'runtime';
    if (kind !== 'persistent' && kind !== 'runtime')
      throw new TypeError(`set: bad kind ${String(kind)}`);
    if (target === null) {
      this.#store.deleteProp(node.index, name);
      return;
    }
    const list = Array.isArray(target);
    const targets = (list ? (target as readonly GraphObject[]) : [target as GraphObject]).map(
      (each) => this.#node(each, `set(${name})`).index,
    );
    const meta = (kind === 'persistent' ? PERSISTENT : 0) | (list ? LIST : 0);
    this.#store.setProp(node.index, name, meta, targets);
  }

  /** Reads property `name`: an object, a list, or `null`. Readable even on destroyed objects. */
  read(object: GraphObject, name: string): GraphObject | GraphObject[] | null {
    const node = this.#node(object, 'read');
    const property = this.#store.readProp(node.index, name);
    if (!property) return null;
    const live = property.targets.map((target) => this.#store.nodes[target]!);
    return property.list ? live : (live[0] ?? null);
  }

  /** Makes `object` a root (counted: each call needs one {@link removeRoot}). */
  addRoot(object: GraphObject): void {
    this.#store.count(this.#store.roots, this.#node(object, 'addRoot').index, 1);
  }

  /** Removes one root count of `object` (nothing when it has none). */
  removeRoot(object: GraphObject): void {
    const node = this.#node(object, 'removeRoot');
    if (this.#store.roots[node.index]! > 0) this.#store.count(this.#store.roots, node.index, -1);
  }

  /** A static property of a type (a class-level reference): keeps `target` alive. */
  setStatic(type: string, name: string, target: GraphObject | null): void {
    const key = `${type}\u0000${name}`;
    const store = this.#store;
    const previous = this.#statics.get(key);
    if (previous && previous.index >= 0) store.count(store.statics, previous.index, -1);
    this.#statics.delete(key);
    if (target === null) return;
    const node = this.#node(target, 'setStatic');
    store.count(store.statics, node.index, 1);
    this.#statics.set(key, node);
  }

  /**
   * Pins `object` as if a stack frame referenced it: `complete` collections keep it while the
   * pin is held. `await using pin = graph.pin(obj)`.
   */
  pin(object: GraphObject): Pin {
    const node = this.#node(object, 'pin');
    const store = this.#store;
    store.count(store.pins, node.index, 1);
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      if (node.index >= 0) store.count(store.pins, node.index, -1);
    };
    return {
      object: node,
      release,
      [Symbol.dispose]: release,
      [Symbol.asyncDispose]: () => {
        release();
        return Promise.resolve();
      },
    };
  }

  // ---------------------------------------------------------------- destruction dependencies

  /**
   * Makes `subscriber` depend on `publisher`: it is notified (through `handler`, a function or
   * the name of a handler of its type) before `publisher` is destroyed, and when both are
   * destroyed together `publisher` goes first. Counted: N calls need N unsubscribes; one
   * notification whatever the count. Self-subscription is allowed (notification only).
   */
  subscribeDestruction(
    publisher: GraphObject,
    subscriber: GraphObject,
    handler?: DestructionHandler | string,
  ): void {
    const from = this.#node(publisher, 'subscribeDestruction: publisher');
    const to = this.#node(subscriber, 'subscribeDestruction: subscriber');
    if (handler !== undefined && typeof handler !== 'function' && typeof handler !== 'string') {
      throw new TypeError(
        `subscribeDestruction: handler must be a function or a name, got ${typeof handler}`,
      );
    }
    // A run calls it with handles of this graph and a NotifyContext.
    const call = handler as NotifyCall | string | undefined;
    const store = this.#store;
    const record = store.findDep(from.index, to.index);
    if (record >= 0) {
      store.setDepCount(record, store.depCount(record) + 1);
      if (call !== undefined) store.handlers[record] = call;
      return;
    }
    store.addDep(from.index, to.index, call);
  }

  /**
   * Removes one subscription of `subscriber` to `publisher`; the dependency goes when there are
   * as many unsubscribes as subscribes. Extra calls do nothing, also once either object left the
   * graph. `handler`, when given, must be the subscribed one.
   */
  unsubscribeDestruction(
    publisher: GraphObject,
    subscriber: GraphObject,
    handler?: DestructionHandler | string,
  ): void {
    // A dropped publisher or subscriber has no subscriptions left: nothing to do.
    if ((publisher as Node).removed || (subscriber as Node).removed) return;
    const from = this.#node(publisher, 'unsubscribeDestruction: publisher');
    const to = this.#node(subscriber, 'unsubscribeDestruction: subscriber');
    const store = this.#store;
    const record = store.findDep(from.index, to.index);
    if (record < 0) return;
    if (handler !== undefined && store.handlers[record] !== handler) {
      throw new TypeError(
        `unsubscribeDestruction: ${to.id} subscribed to ${from.id} with another handler`,
      );
    }
    const count = store.depCount(record) - 1;
    if (count > 0) store.setDepCount(record, count);
    else store.unlinkDep(record);
  }

  /** Number of subscriptions of `subscriber` to `publisher` (0 when none). */
  subscriptionCount(publisher: GraphObject, subscriber: GraphObject): number {
    const from = this.#node(publisher, 'subscriptionCount');
    const to = this.#node(subscriber, 'subscriptionCount');
    const record = this.#store.findDep(from.index, to.index);
    return record < 0 ? 0 : this.#store.depCount(record);
  }

  /** True while `object` is scheduled for destruction by a running {@link destroy}. */
  isDoomed(object: GraphObject): boolean {
    return (this.#store.flags[this.#node(object, 'isDoomed').index]! & DOOMED) !== 0;
  }

  /** True once `object` has been destroyed (its methods are then refused by {@link guard}). */
  isDestroyed(object: GraphObject): boolean {
    return this.#destroyed(this.#node(object, 'isDestroyed'));
  }

  /** Destroyed (objects that left the graph all were). */
  #destroyed(node: Node): boolean {
    return node.index < 0 || (this.#store.flags[node.index]! & DESTROYED) !== 0;
  }

  /**
   * A view of `object.value` whose methods throw `destroy-graph.destroyed_object` once the object
   * is destroyed; properties stay readable.
   */
  guard<V extends object>(object: GraphObject<V>): V {
    const node = this.#node(object, 'guard') as Node<V>;
    if (typeof node.value !== 'object' || node.value === null) {
      throw new TypeError(`guard: ${node.id} has no object value`);
    }
    return guardValue(node, node.value, () => this.#destroyed(node as Node));
  }

  // ---------------------------------------------------------------- collection and planning

  /**
   * Objects (live, not doomed) unreachable from the roots and statics — through persistent
   * references only, or through every reference with pins as extra roots — in insertion order.
   * Destroyed objects found unreachable are dropped from the graph on the way.
   */
  collect(options: CollectOptions = {}): GraphObject[] {
    const scope = options.scope ?? 'complete';
    if (scope !== 'persistent' && scope !== 'complete') {
      throw new TypeError(
        `collect: scope must be 'persistent' or 'complete', got ${String(scope)}`,
      );
    }
    const store = this.#store;
    const stamp = store.reach(scope === 'complete');
    const { allocated, flags, mark, nodes } = store;
    // Count, then fill a preallocated array (a million pushes cost more than a second pass).
    let count = 0;
    for (let index = 0; index < allocated; index++) {
      if (mark[index] !== stamp && flags[index] === 0) count++;
    }
    const out = new Array<GraphObject>(count);
    let written = 0;
    let unreachableDestroyed: number[] | undefined;
    for (let index = 0; index < allocated; index++) {
      const flag = flags[index]!;
      if (mark[index] === stamp || (flag & REMOVED) !== 0) continue;
      if ((flag & DESTROYED) !== 0) (unreachableDestroyed ??= []).push(index);
      else if ((flag & DOOMED) === 0) out[written++] = nodes[index]!;
    }
    if (unreachableDestroyed) {
      // Destroyed objects leave the graph once nothing at all reaches them.
      const complete = scope === 'complete' ? stamp : store.reach(true);
      this.#drop(
        unreachableDestroyed
          .filter((index) => store.mark[index] !== complete)
          .map((index) => store.nodes[index]!),
      );
    }
    return out;
  }

  /**
   * Orders the destruction of `objects` (handles or ids; destroyed objects are skipped) in O(V+E):
   * owned objects before their owners, dependencies before their dependents, cycles reported.
   */
  plan(objects: Iterable<GraphObject | string>): DestructionPlan {
    const flags = this.#store.flags;
    let indices: Int32Array;
    let count = 0;
    if (Array.isArray(objects)) {
      // The common case (an array, e.g. from collect): one typed array, no growth.
      const list = objects as ReadonlyArray<GraphObject | string>;
      indices = new Int32Array(list.length);
      for (let k = 0; k < list.length; k++) {
        const index = this.#node(list[k]!, 'plan').index;
        if ((flags[index]! & DESTROYED) === 0) indices[count++] = index;
      }
    } else {
      const list: number[] = [];
      for (const object of objects) {
        const index = this.#node(object, 'plan').index;
        if ((flags[index]! & DESTROYED) === 0) list.push(index);
      }
      indices = Int32Array.from(list);
      count = list.length;
    }
    const { groups, cycles, csr } = planIndices(this.#store, this.#scratch, indices, count);
    return new DestructionPlan(this, groups, cycles, csr);
  }

  /** Collects (`scope`) and plans in one call. */
  planCollection(options: CollectOptions = {}): DestructionPlan {
    return this.plan(this.collect(options));
  }

  // ---------------------------------------------------------------- the run

  /**
   * Runs a plan in two steps. Step 1, notify: for groups in reverse order, every subscriber of a
   * doomed publisher has its handler called once (in parallel within a group). Step 2, destroy:
   * for groups in direct order, every object's destroy functions run (in parallel within a
   * group, at most `concurrency` at once), then it is marked destroyed. Afterwards destroyed
   * objects reachable again stay, marked destroyed; the others leave the graph.
   *
   * Resolves with a report (also when stopped by a failure or aborted mid-run; it rejects only
   * when `signal` is aborted before the start). Run the same plan again to resume.
   */
  async destroy(
    plan: DestructionPlan | PlanJSON,
    options: DestroyOptions = {},
  ): Promise<DestroyReport> {
    const concurrency =
      options.concurrency === Infinity
        ? Infinity
        : positiveIntegerOption('destroy', 'concurrency', options.concurrency, 16);
    const policy = options.policy ?? 'stop';
    if (policy !== 'stop' && policy !== 'continue') {
      throw new TypeError(`destroy: policy must be 'stop' or 'continue', got ${String(policy)}`);
    }
    const timeoutMs = timeoutOption('destroy', options.timeoutMs);
    const { signal } = options;
    throwIfAborted(signal);
    const groups = this.#resolvePlan(plan);
    if (this.#running) {
      throw new DestroyGraphError(
        'destroy-graph.busy',
        'another destroy run is in progress on this graph',
      );
    }
    this.#running = true;
    try {
      const run = new DestroyRun(this.#runContext(), ++this.#runs, groups, {
        concurrency,
        policy,
        timeoutMs,
        signal,
      });
      return await run.run();
    } finally {
      this.#running = false;
    }
  }

  /** Collects, plans and destroys in one call. */
  async gc(options: CollectOptions & DestroyOptions = {}): Promise<DestroyReport> {
    return this.destroy(this.planCollection(options), options);
  }

  #runContext(): RunContext {
    return {
      graph: this,
      store: this.#store,
      registry: this.#types,
      events: this.events,
      clock: this.#clock,
      drop: (nodes) => this.#drop(nodes),
    };
  }

  #resolvePlan(plan: DestructionPlan | PlanJSON): Node[][] {
    if (plan instanceof DestructionPlan) {
      if (plan.graph !== this) throw new TypeError('destroy: the plan belongs to another graph');
      return plan.groups as Node[][];
    }
    if (plan?.format !== 'rigging.destroy-plan' || !Array.isArray(plan.groups)) {
      throw new TypeError('destroy: expected a DestructionPlan or its JSON');
    }
    return plan.groups.map((group) =>
      group.objects
        .map((object) => this.#store.byId.get(object.id))
        .filter((node): node is Node => node !== undefined),
    );
  }

  /** Removes destroyed objects from the graph; returns their ids. */
  #drop(nodes: Handle[]): string[] {
    const gone = nodes.filter((node) => node.index >= 0);
    if (gone.length === 0) return [];
    const store = this.#store;
    for (const node of gone) {
      store.remove(node.index);
      node.index = -1;
    }
    for (const node of gone) this.events.emit('object:dropped', { id: node.id, type: node.type });
    if (store.wantsCompaction()) compact(store);
    return gone.map((node) => node.id);
  }

  #node(object: GraphObject | string, what: string): Node {
    const node = typeof object === 'string' ? this.#store.byId.get(object) : object;
    if (!(node instanceof Node) || node.graph !== this || node.index < 0) {
      const id = typeof object === 'string' ? object : (object as GraphObject | undefined)?.id;
      throw new DestroyGraphError(
        'destroy-graph.unknown_object',
        `${what}: ${String(id)} is not in this graph`,
        { details: { id: id ?? null } },
      );
    }
    return node;
  }

  // ---------------------------------------------------------------- explain and serialization

  /** Why `object` is or is not going to be destroyed, and what orders its destruction. */
  explain(object: GraphObject): Explanation {
    return explainNode(this.#store, this.#node(object, 'explain'));
  }

  /** The graph as JSON: objects (with the destroyed flag), references, roots, statics, subscriptions. */
  serialize(): GraphSnapshot {
    return serializeStore(this.#store, this.#types, this.#statics);
  }

  /**
   * Rebuilds a graph from {@link serialize}'s JSON; destroyed objects stay destroyed. Function
   * handlers are not serialized: subscribe with handler names to keep them.
   */
  static deserialize(snapshot: GraphSnapshot, options: ObjectGraphOptions = {}): ObjectGraph {
    const graph = new ObjectGraph(options);
    const target: SnapshotTarget<Node> = {
      add: (object) => graph.#add(object),
      setStatic: (type, name, object) => graph.setStatic(type, name, object),
      subscribeDestruction: (publisher, subscriber, handler) =>
        graph.subscribeDestruction(publisher, subscriber, handler),
    };
    restoreSnapshot(target, graph.#store, graph.#types, snapshot);
    return graph;
  }
}

/**
 * The order in which a set of objects will be destroyed: groups destroyed one after the other,
 * objects within a group in parallel. Data only: nothing has happened yet.
 */
export class DestructionPlan {
  /** The graph the plan was made for. */
  readonly graph: ObjectGraph;
  /** Groups in destruction order; within a group, ownership depth (deepest first), then id. */
  readonly groups: ReadonlyArray<readonly GraphObject[]>;
  /** Cycles found (objects in a cycle are all destroyed, in the tie order). */
  readonly cycles: readonly PlanCycle[];
  /** Number of objects planned. */
  readonly size: number;
  readonly #csr: Csr;
  #groupOf: Map<GraphObject, number> | undefined;
  #edges: PlanEdge[] | undefined;

  /** @internal */
  constructor(graph: ObjectGraph, groups: Node[][], cycles: PlanCycle[], csr: Csr) {
    this.graph = graph;
    this.groups = groups;
    this.cycles = cycles;
    this.#csr = csr;
    let size = 0;
    for (const g of groups) size += g.length;
    this.size = size;
  }

  /** Index of the group `object` is destroyed in, or -1 when it is not in the plan. */
  groupOf(object: GraphObject): number {
    if (!this.#groupOf) {
      this.#groupOf = new Map();
      this.groups.forEach((g, i) => {
        for (const o of g) this.#groupOf!.set(o, i);
      });
    }
    return this.#groupOf.get(object) ?? -1;
  }

  /** Every ordering constraint between planned objects, with its reason (computed on first use). */
  get edges(): readonly PlanEdge[] {
    this.#edges ??= computeEdges(this.#csr);
    return this.#edges;
  }

  /** The plan as JSON, for `JSON.stringify(plan)` (edges are computed if not yet). */
  toJSON(): PlanJSON {
    return planToJSON(this);
  }

  /** A readable listing: one line per object, with what it waits for and why. */
  format(): string {
    return formatPlan(this);
  }

  /** The same as {@link DestructionPlan.format}. */
  toString(): string {
    return this.format();
  }
}

/**
 * @internal the implementation of {@link GraphObject}: a small handle. Everything else about the
 * object (owner, flags, counters, properties, dependencies) lives in its graph's {@link Store} at
 * `index` (-1 once the object left the graph).
 */
export class Node<V = unknown> implements GraphObject<V>, Handle {
  readonly id: string;
  readonly type: string;
  value: V;
  readonly graph: ObjectGraph;
  readonly #store: Store<Node>;
  /** Index in the graph's store; -1 once removed. */
  index = -1;
  destroyFn: DestroyCall | undefined;

  constructor(
    graph: ObjectGraph,
    store: Store<Node>,
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
    // A run calls it with this very handle and a DestroyContext of this graph.
    this.destroyFn = destroyFn as DestroyCall | undefined;
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
