import {
  TypedEmitter,
  explainNotJson,
  raceAbort,
  scopedSignal,
  serializeError,
  throwIfAborted,
} from '@rigging/core';
import type { Json, SerializedError } from '@rigging/core';
import { DestroyGraphError } from './errors.js';
import type { DestroyGraphEvents, RunStatus } from './events.js';
import { Node, ownerAccess } from './node.js';
import type { DestroyFn, DestructionHandler, GraphObject, ReferenceKind } from './node.js';
import { DestructionPlan, planNodes } from './plan.js';
import {
  DESTROYED,
  DOOMED,
  DS,
  D_COUNT,
  D_PUB,
  D_SUB,
  LIST,
  PERSISTENT,
  REMOVED,
  Store,
} from './store.js';
import type { PlanJSON } from './plan.js';

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
}

interface TypeInfo {
  name: string;
  def: TypeDefinition;
}

let idOrderOf: (graph: ObjectGraph) => Int32Array;
let storeOfGraph: (graph: ObjectGraph) => Store;

/** A subscription as the run sees it. */
interface Subscription {
  subscriber: Node;
  handler: DestructionHandler | string | undefined;
}

/**
 * A graph of resource objects: ids, types, an ownership tree, persistent and runtime references,
 * roots, statics and pins; destruction dependencies; collection, planning and the two-step
 * destruction (notify in reverse order, destroy in direct order).
 */
export class ObjectGraph {
  /** Typed events of every step (see {@link DestroyGraphEvents}). */
  readonly events = new TypedEmitter<DestroyGraphEvents>();
  readonly #types = new Map<string, TypeInfo>();
  readonly #objects = new Map<string, Node>();
  readonly #statics = new Map<string, Node>();
  /** Ownership, flags, counters, properties and dependencies of every object, by index. */
  readonly #s = new Store();
  #seq = 0;

  static {
    idOrderOf = (graph) => graph.#idOrder();
    storeOfGraph = (graph) => graph.#s;
    ownerAccess.get = (node) => {
      if (node.i < 0) return null;
      const s = node.graph.#s;
      const o = s.owner[node.i]!;
      return o >= 0 && s.live(o) ? s.nodes[o]! : null;
    };
  }
  #runs = 0;
  #running = false;

  constructor(options: ObjectGraphOptions = {}) {
    for (const [name, def] of Object.entries(options.types ?? {})) this.defineType(name, def);
  }

  // ---------------------------------------------------------------- types and objects

  /** Defines (or redefines) a type. */
  defineType<V = any>(name: string, definition: TypeDefinition<V>): void {
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`defineType: name must be a non-empty string, got ${String(name)}`);
    }
    for (const [prop, kind] of Object.entries(definition.properties ?? {})) {
      if (kind !== 'persistent' && kind !== 'runtime') {
        throw new TypeError(
          `defineType(${name}): property ${prop} must be 'persistent' or 'runtime', got ${String(kind)}`,
        );
      }
    }
    let parent = definition.extends;
    const seen = new Set([name]);
    while (parent !== undefined) {
      if (seen.has(parent))
        throw new TypeError(`defineType(${name}): circular extends through ${parent}`);
      seen.add(parent);
      parent = this.#types.get(parent)?.def.extends;
    }
    this.#types.set(name, { name, def: definition as TypeDefinition });
  }

  /** Adds an object. */
  add<V = unknown>(options: AddOptions<V>): GraphObject<V> {
    const { type } = options;
    if (typeof type !== 'string' || type === '') {
      throw new TypeError(`add: type must be a non-empty string, got ${String(type)}`);
    }
    const id = options.id ?? `${type}-${this.#seq + 1}`;
    if (typeof id !== 'string' || id === '')
      throw new TypeError(`add: id must be a non-empty string, got ${String(id)}`);
    if (this.#objects.has(id)) throw new TypeError(`add: an object with id ${id} already exists`);
    const owner = options.owner == null ? null : this.#node(options.owner, 'add: owner');
    this.#seq++;
    const node = new Node<V>(this, id, type, options.value as V, -1, options.destroy);
    node.i = this.#s.add(node as Node, id, owner ? owner.i : -1);
    this.#objects.set(id, node as Node);
    if (options.root) this.#s.count(this.#s.roots, node.i, 1);
    return node;
  }

  /** The object with this id. */
  get(id: string): GraphObject | undefined {
    return this.#objects.get(id);
  }

  has(object: GraphObject | string): boolean {
    const node = typeof object === 'string' ? this.#objects.get(object) : object;
    return node instanceof Node && node.graph === this && node.i >= 0;
  }

  get size(): number {
    return this.#objects.size;
  }

  /** Every object, in insertion order. */
  objects(): IterableIterator<GraphObject> {
    return this.#objects.values();
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
    const declared = this.#declaredKind(node.type, name);
    if (options.kind !== undefined && declared !== undefined && options.kind !== declared) {
      throw new TypeError(`set: ${node.type}.${name} is declared ${declared}, not ${options.kind}`);
    }
    const kind = declared ?? options.kind ?? 'runtime';
    if (kind !== 'persistent' && kind !== 'runtime')
      throw new TypeError(`set: bad kind ${String(kind)}`);
    if (target === null) {
      this.#s.deleteProp(node.i, name);
      return;
    }
    const list = Array.isArray(target);
    const targets = (list ? (target as readonly GraphObject[]) : [target as GraphObject]).map(
      (t) => this.#node(t, `set(${name})`).i,
    );
    this.#s.setProp(
      node.i,
      name,
      (kind === 'persistent' ? PERSISTENT : 0) | (list ? LIST : 0),
      targets,
    );
  }

  /** Reads property `name`: an object, a list, or `null`. Readable even on destroyed objects. */
  read(object: GraphObject, name: string): GraphObject | GraphObject[] | null {
    const node = this.#node(object, 'read');
    const slot = this.#s.readProp(node.i, name);
    if (!slot) return null;
    const live = slot.targets.map((t) => this.#s.nodes[t]!);
    return slot.list ? live : (live[0] ?? null);
  }

  /** Makes `object` a root (counted: each call needs one {@link removeRoot}). */
  addRoot(object: GraphObject): void {
    this.#s.count(this.#s.roots, this.#node(object, 'addRoot').i, 1);
  }

  removeRoot(object: GraphObject): void {
    const node = this.#node(object, 'removeRoot');
    if (this.#s.roots[node.i]! > 0) this.#s.count(this.#s.roots, node.i, -1);
  }

  /** A static property of a type (a class-level reference): keeps `target` alive. */
  setStatic(type: string, name: string, target: GraphObject | null): void {
    const key = `${type}\u0000${name}`;
    const previous = this.#statics.get(key);
    if (previous && previous.i >= 0) this.#s.count(this.#s.statics, previous.i, -1);
    this.#statics.delete(key);
    if (target === null) return;
    const node = this.#node(target, 'setStatic');
    this.#s.count(this.#s.statics, node.i, 1);
    this.#statics.set(key, node);
  }

  /**
   * Pins `object` as if a stack frame referenced it: `complete` collections keep it while the
   * pin is held. `await using pin = graph.pin(obj)`.
   */
  pin(object: GraphObject): Pin {
    const node = this.#node(object, 'pin');
    this.#s.count(this.#s.pins, node.i, 1);
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      if (node.i >= 0) this.#s.count(this.#s.pins, node.i, -1);
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
    const pub = this.#node(publisher, 'subscribeDestruction: publisher');
    const sub = this.#node(subscriber, 'subscribeDestruction: subscriber');
    if (handler !== undefined && typeof handler !== 'function' && typeof handler !== 'string') {
      throw new TypeError(
        `subscribeDestruction: handler must be a function or a name, got ${typeof handler}`,
      );
    }
    const store = this.#s;
    const r = store.findDep(pub.i, sub.i);
    if (r >= 0) {
      store.deps[r * DS + D_COUNT]!++;
      if (handler !== undefined) store.handlers[r] = handler;
      return;
    }
    store.addDep(pub.i, sub.i, handler);
  }

  /**
   * Removes one subscription of `subscriber` to `publisher`; the dependency goes when there are
   * as many unsubscribes as subscribes. Extra calls do nothing, also once either object left the
   * graph. `handler`, when given, must be
   * the subscribed one.
   */
  unsubscribeDestruction(
    publisher: GraphObject,
    subscriber: GraphObject,
    handler?: DestructionHandler | string,
  ): void {
    // A dropped publisher or subscriber has no subscriptions left: nothing to do.
    if ((publisher as Node).removed || (subscriber as Node).removed) return;
    const pub = this.#node(publisher, 'unsubscribeDestruction: publisher');
    const sub = this.#node(subscriber, 'unsubscribeDestruction: subscriber');
    const store = this.#s;
    const r = store.findDep(pub.i, sub.i);
    if (r < 0) return;
    if (handler !== undefined && store.handlers[r] !== handler) {
      throw new TypeError(
        `unsubscribeDestruction: ${sub.id} subscribed to ${pub.id} with another handler`,
      );
    }
    if (--store.deps[r * DS + D_COUNT]! > 0) return;
    store.unlinkDep(r);
  }

  /** Number of subscriptions of `subscriber` to `publisher` (0 when none). */
  subscriptionCount(publisher: GraphObject, subscriber: GraphObject): number {
    const pub = this.#node(publisher, 'subscriptionCount');
    const sub = this.#node(subscriber, 'subscriptionCount');
    const r = this.#s.findDep(pub.i, sub.i);
    return r < 0 ? 0 : this.#s.deps[r * DS + D_COUNT]!;
  }

  /** True while `object` is scheduled for destruction by a running {@link destroy}. */
  isDoomed(object: GraphObject): boolean {
    return (this.#s.flags[this.#node(object, 'isDoomed').i]! & DOOMED) !== 0;
  }

  /** True once `object` has been destroyed (its methods are then refused by {@link guard}). */
  isDestroyed(object: GraphObject): boolean {
    return this.#destroyed(this.#node(object, 'isDestroyed'));
  }

  /** Destroyed (objects that left the graph all were). */
  #destroyed(node: Node): boolean {
    return node.i < 0 || (this.#s.flags[node.i]! & DESTROYED) !== 0;
  }

  /**
   * A view of `object.value` whose methods throw `destroy.destroyed_object` once the object is
   * destroyed; properties stay readable.
   */
  guard<V extends object>(object: GraphObject<V>): V {
    const node = this.#node(object, 'guard') as Node<V>;
    if (typeof node.value !== 'object' || node.value === null) {
      throw new TypeError(`guard: ${node.id} has no object value`);
    }
    return new Proxy(node.value, {
      get: (target, key, receiver) => {
        const v: unknown = Reflect.get(target, key, receiver);
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          if (this.#destroyed(node as Node)) {
            throw new DestroyGraphError(
              'destroy.destroyed_object',
              `${node.id} (${node.type}) is destroyed: ${String(key)}() refused`,
              { details: { id: node.id, type: node.type, method: String(key) } },
            );
          }
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
      set: (target, key, value) => {
        if (this.#destroyed(node as Node)) {
          throw new DestroyGraphError(
            'destroy.destroyed_object',
            `${node.id} (${node.type}) is destroyed: its properties are read-only`,
            { details: { id: node.id, type: node.type, property: String(key) } },
          );
        }
        return Reflect.set(target, key, value);
      },
    });
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
    const s = this.#s;
    const stamp = s.reach(scope === 'complete');
    const { n, flags, mark, nodes } = s;
    // Count, then fill a preallocated array (a million pushes cost more than a second pass).
    let count = 0;
    for (let i = 0; i < n; i++) if (mark[i] !== stamp && flags[i] === 0) count++;
    const out = new Array<GraphObject>(count);
    let k = 0;
    let unreachableDestroyed: number[] | undefined;
    for (let i = 0; i < n; i++) {
      const f = flags[i]!;
      if (mark[i] === stamp || (f & REMOVED) !== 0) continue;
      if ((f & DESTROYED) !== 0) (unreachableDestroyed ??= []).push(i);
      else if ((f & DOOMED) === 0) out[k++] = nodes[i]!;
    }
    if (unreachableDestroyed) {
      // Destroyed objects leave the graph once nothing at all reaches them.
      const complete = scope === 'complete' ? stamp : s.reach(true);
      this.#drop(
        unreachableDestroyed.filter((i) => s.mark[i] !== complete).map((i) => s.nodes[i]!),
      );
    }
    return out;
  }

  /**
   * Orders the destruction of `objects` (handles or ids; destroyed objects are skipped) in O(V+E):
   * owned objects before their owners, dependencies before their dependents, cycles reported.
   */
  plan(objects: Iterable<GraphObject | string>): DestructionPlan {
    const flags = this.#s.flags;
    let indices: Int32Array;
    let count = 0;
    if (Array.isArray(objects)) {
      // The common case (an array, e.g. from collect): one typed array, no growth.
      const list = objects as ReadonlyArray<GraphObject | string>;
      indices = new Int32Array(list.length);
      for (let k = 0; k < list.length; k++) {
        const i = this.#node(list[k]!, 'plan').i;
        if ((flags[i]! & DESTROYED) === 0) indices[count++] = i;
      }
    } else {
      const list: number[] = [];
      for (const o of objects) {
        const i = this.#node(o, 'plan').i;
        if ((flags[i]! & DESTROYED) === 0) list.push(i);
      }
      indices = Int32Array.from(list);
      count = list.length;
    }
    return planNodes(this, this.#s, indices, count);
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
    const concurrency = options.concurrency ?? 16;
    if (!(Number.isInteger(concurrency) && concurrency >= 1) && concurrency !== Infinity) {
      throw new TypeError(
        `destroy: concurrency must be an integer >= 1, got ${String(concurrency)}`,
      );
    }
    const policy = options.policy ?? 'stop';
    if (policy !== 'stop' && policy !== 'continue') {
      throw new TypeError(`destroy: policy must be 'stop' or 'continue', got ${String(policy)}`);
    }
    const { timeoutMs, signal } = options;
    if (timeoutMs !== undefined && !(timeoutMs >= 0)) {
      throw new TypeError(`destroy: timeoutMs must be >= 0, got ${String(timeoutMs)}`);
    }
    throwIfAborted(signal);
    const groups = this.#resolvePlan(plan);
    if (this.#running) {
      throw new DestroyGraphError(
        'destroy.busy',
        'another destroy run is in progress on this graph',
      );
    }
    this.#running = true;
    const runId = ++this.#runs;
    const report: DestroyReport = {
      runId,
      status: 'completed',
      destroyed: [],
      failed: [],
      pending: [],
      resurrected: [],
      dropped: [],
    };
    const ev = this.events;
    const store = this.#s;
    const todo = groups.map((g) => g.filter((n) => !this.#destroyed(n)));
    const all = todo.flat();
    try {
      for (const n of all) store.flags[n.i]! |= DOOMED;
      ev.emit('destroy:started', { runId, objects: all.length, groups: todo.length });
      todo.forEach((g, group) => {
        for (const n of g) ev.emit('destroy:scheduled', { runId, id: n.id, type: n.type, group });
      });
      let stop = false;
      // Step 1: notify, groups in reverse order.
      for (let group = todo.length - 1; group >= 0 && !stop; group--) {
        const tasks: Array<() => Promise<void>> = [];
        for (const pub of todo[group]!) {
          if (pub.i < 0) continue;
          const subs: Subscription[] = store.subscribersOf(pub.i).map((r) => ({
            subscriber: store.nodes[store.deps[r * DS + D_SUB]!]!,
            handler: store.handlers[r],
          }));
          for (const s of subs) {
            const sub = s.subscriber;
            if (this.#destroyed(sub)) continue;
            const handler = this.#handler(s);
            if (!handler) continue;
            tasks.push(async () => {
              const outcome = await this.#call(
                (sig) => handler(pub, { subscriber: sub, signal: sig, graph: this, group }),
                signal,
                timeoutMs,
              );
              if (outcome === 'ok') {
                ev.emit('destroy:notified', { runId, id: pub.id, subscriber: sub.id, group });
              } else if (outcome !== 'aborted') {
                const failure: RunFailure = {
                  id: pub.id,
                  step: 'notify',
                  subscriber: sub.id,
                  timedOut: outcome.timedOut,
                  error: serializeError(outcome.error),
                };
                report.failed.push(failure);
                ev.emit('destroy:failed', { runId, type: pub.type, group, ...failure });
                if (policy === 'stop') stop = true;
              }
            });
          }
        }
        await pool(tasks, concurrency, signal);
        if (signal?.aborted) stop = true;
      }
      // Step 2: destroy, groups in direct order.
      for (let group = 0; group < todo.length && !stop; group++) {
        const tasks = todo[group]!.filter((n) => !this.#destroyed(n)).map((n) => async () => {
          const fns = this.#destroyFns(n);
          const started = Date.now();
          ev.emit('destroy:destroying', { runId, id: n.id, type: n.type, group });
          const outcome = await this.#call(
            async (sig) => {
              for (const fn of fns) await fn(n, { signal: sig, graph: this, group });
            },
            signal,
            timeoutMs,
          );
          if (outcome === 'ok') {
            if (n.i >= 0) store.flags[n.i]! |= DESTROYED;
            report.destroyed.push(n.id);
            ev.emit('destroy:destroyed', {
              runId,
              id: n.id,
              type: n.type,
              group,
              durationMs: Date.now() - started,
            });
          } else if (outcome !== 'aborted') {
            const failure: RunFailure = {
              id: n.id,
              step: 'destroy',
              timedOut: outcome.timedOut,
              error: serializeError(outcome.error),
            };
            report.failed.push(failure);
            ev.emit('destroy:failed', { runId, type: n.type, group, ...failure });
            if (policy === 'stop') stop = true;
          }
        });
        await pool(tasks, concurrency, signal);
        if (signal?.aborted) stop = true;
      }
      report.status = signal?.aborted ? 'aborted' : stop ? 'stopped' : 'completed';
    } finally {
      for (const n of all) if (n.i >= 0) store.flags[n.i]! &= ~DOOMED;
      this.#running = false;
    }
    // Keep what is reachable again; drop the rest.
    const mark = store.reach(true);
    const drop: Node[] = [];
    for (const n of all) {
      if (!this.#destroyed(n)) {
        report.pending.push(n.id);
      } else if (n.i >= 0 && store.mark[n.i] === mark) {
        report.resurrected.push(n.id);
        ev.emit('destroy:resurrected', { runId, id: n.id, type: n.type });
      } else {
        drop.push(n);
      }
    }
    report.dropped = this.#drop(drop);
    ev.emit('destroy:finished', {
      runId,
      status: report.status,
      destroyed: report.destroyed.length,
      failed: report.failed.length,
      pending: report.pending.length,
      resurrected: report.resurrected.length,
    });
    return report;
  }

  /** Collects, plans and destroys in one call. */
  async gc(options: CollectOptions & DestroyOptions = {}): Promise<DestroyReport> {
    return this.destroy(this.planCollection(options), options);
  }

  async #call(
    fn: (signal: AbortSignal) => unknown,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
  ): Promise<'ok' | 'aborted' | { error: unknown; timedOut: boolean }> {
    if (signal?.aborted) return 'aborted';
    using scope = scopedSignal({
      signal,
      timeoutMs,
      onTimeout: () =>
        new DestroyGraphError('destroy.timeout', `timed out after ${String(timeoutMs)} ms`, {
          details: { timeoutMs: timeoutMs ?? null },
        }),
    });
    try {
      await raceAbort(
        Promise.resolve().then(() => fn(scope.signal)),
        scope.signal,
      );
      return 'ok';
    } catch (error) {
      if (scope.timedOut) return { error, timedOut: true };
      if (signal?.aborted) return 'aborted';
      return { error, timedOut: false };
    }
  }

  #handler(s: Subscription): DestructionHandler | undefined {
    const h = s.handler;
    if (typeof h === 'function') return h;
    if (h === undefined) return undefined;
    for (const t of this.#chain(s.subscriber.type)) {
      const found = t.def.handlers?.[h];
      if (found) return found;
    }
    return () => {
      throw new TypeError(`no handler named ${h} on type ${s.subscriber.type} (or its parents)`);
    };
  }

  #destroyFns(n: Node): DestroyFn[] {
    const fns: DestroyFn[] = [];
    for (const t of this.#chain(n.type)) if (t.def.destroy) fns.push(t.def.destroy);
    if (n.destroyFn) fns.push(n.destroyFn);
    return fns;
  }

  *#chain(type: string): Generator<TypeInfo> {
    let t = this.#types.get(type);
    while (t) {
      yield t;
      t = t.def.extends === undefined ? undefined : this.#types.get(t.def.extends);
    }
  }

  #declaredKind(type: string, prop: string): ReferenceKind | undefined {
    for (const t of this.#chain(type)) {
      const kind = t.def.properties?.[prop];
      if (kind) return kind;
    }
    return undefined;
  }

  #resolvePlan(plan: DestructionPlan | PlanJSON): Node[][] {
    if (plan instanceof DestructionPlan) {
      if (plan.graph !== this) throw new TypeError('destroy: the plan belongs to another graph');
      return plan.groups as Node[][];
    }
    if (plan?.format !== 'rigging.destroy-plan' || !Array.isArray(plan.groups)) {
      throw new TypeError('destroy: expected a DestructionPlan or its JSON');
    }
    return plan.groups.map((g) =>
      g.objects.map((o) => this.#objects.get(o.id)).filter((n): n is Node => n !== undefined),
    );
  }

  /** Removes destroyed objects from the graph; returns their ids. */
  #drop(nodes: Node[]): string[] {
    const gone = nodes.filter((n) => n.i >= 0);
    if (gone.length === 0) return [];
    const s = this.#s;
    for (const n of gone) {
      s.remove(n.i);
      n.i = -1;
      this.#objects.delete(n.id);
    }
    for (const n of gone) this.events.emit('object:dropped', { id: n.id, type: n.type });
    if (s.wantsCompaction()) s.compact();
    return gone.map((n) => n.id);
  }

  #node(object: GraphObject | string, what: string): Node {
    const node = typeof object === 'string' ? this.#objects.get(object) : object;
    if (!(node instanceof Node) || node.graph !== this || node.i < 0) {
      const id = typeof object === 'string' ? object : (object as GraphObject | undefined)?.id;
      throw new DestroyGraphError(
        'destroy.unknown_object',
        `${what}: ${String(id)} is not in this graph`,
        {
          details: { id: id ?? null },
        },
      );
    }
    return node;
  }

  /**
   * Live indices in id order: the cached order, merged with the objects added since (indices
   * grow with insertion, so those are the indices from `sortedUpTo` on).
   */
  #idOrder(): Int32Array {
    const s = this.#s;
    if (s.sortedUpTo === s.n) return s.sorted;
    const fresh: string[] = [];
    for (let i = s.sortedUpTo; i < s.n; i++) if (s.live(i)) fresh.push(s.ids[i]!);
    // Sorting the strings natively is much faster than a comparator over indices.
    fresh.sort();
    const old = s.sorted;
    const merged = new Int32Array(old.length + fresh.length);
    let i = 0;
    let j = 0;
    let k = 0;
    while (i < old.length || j < fresh.length) {
      const a = old[i];
      if (a !== undefined && !s.live(a)) {
        i++;
        continue;
      }
      const b = fresh[j];
      if (b === undefined || (a !== undefined && s.ids[a]! < b)) {
        merged[k++] = a!;
        i++;
      } else {
        merged[k++] = this.#objects.get(b)!.i;
        j++;
      }
    }
    s.sorted = merged.subarray(0, k);
    s.sortedUpTo = s.n;
    return s.sorted;
  }

  // ---------------------------------------------------------------- explain

  /** Why `object` is or is not going to be destroyed, and what orders its destruction. */
  explain(object: GraphObject): Explanation {
    const node = this.#node(object, 'explain');
    const s = this.#s;
    const me = node.i;
    const persistent = s.reach(false);
    const persistentlyReachable = s.mark[me] === persistent;
    const { reachable, path } = this.#pathTo(me);
    const referencedBy: Explanation['referencedBy'] = [];
    const after: Explanation['after'] = [];
    for (let i = 0; i < s.n; i++) {
      if (!s.live(i)) continue;
      if (s.owner[i] === me) after.push({ id: s.ids[i]!, reason: 'owns' });
      if (s.slotHead[i]! < 0) continue;
      for (const slot of s.props(i)) {
        if (slot.targets.includes(me))
          referencedBy.push({ id: s.ids[i]!, property: slot.name, kind: slot.kind });
      }
    }
    for (const r of s.publishersOf(me)) {
      const pub = s.deps[r * DS + D_PUB]!;
      if (pub !== me) after.push({ id: s.ids[pub]!, reason: 'depends on' });
    }
    const before: Explanation['before'] = [];
    const owner = node.owner;
    if (owner) before.push({ id: owner.id, reason: 'owned by' });
    for (const r of s.subscribersOf(me)) {
      const sub = s.deps[r * DS + D_SUB]!;
      if (sub !== me) before.push({ id: s.ids[sub]!, reason: 'dependency of' });
    }
    const flags = s.flags[me]!;
    const state =
      (flags & DESTROYED) !== 0 ? 'destroyed' : (flags & DOOMED) !== 0 ? 'doomed' : 'live';
    const collectedBy: Explanation['collectedBy'] = [];
    if (state === 'live') {
      if (!persistentlyReachable) collectedBy.push('persistent');
      if (!reachable) collectedBy.push('complete');
    }
    const parts: string[] = [];
    const name = `${node.id} (${node.type})`;
    if (state === 'destroyed')
      parts.push(`${name} is destroyed${reachable ? ' and kept: it is reachable again' : ''}.`);
    else if (state === 'doomed') parts.push(`${name} is being destroyed by a running plan.`);
    else if (!reachable) parts.push(`${name} is unreachable: any collection destroys it.`);
    else if (!persistentlyReachable) {
      parts.push(
        `${name} is kept by runtime references or pins only (${path?.join(' -> ')}): a persistent collection destroys it.`,
      );
    } else
      parts.push(
        `${name} is kept alive by ${path && path.length > 1 ? path.join(' -> ') : 'being a root'}.`,
      );
    if (after.length > 0)
      parts.push(`It goes after ${after.map((a) => `${a.id} (${a.reason} it)`).join(', ')}.`);
    if (before.length > 0)
      parts.push(`It goes before ${before.map((b) => `${b.id} (${b.reason} it)`).join(', ')}.`);
    return {
      id: node.id,
      type: node.type,
      state,
      root: s.roots[me]! > 0,
      static: s.statics[me]! > 0,
      pins: s.pins[me]!,
      persistentlyReachable,
      reachable,
      path,
      referencedBy,
      collectedBy,
      after,
      before,
      text: parts.join(' '),
    };
  }

  /** A shortest chain of references from a root, static or pin to `target` (breadth first). */
  #pathTo(target: number): { reachable: boolean; path: string[] | null } {
    const s = this.#s;
    const UNSEEN = -2;
    const parent = new Int32Array(s.n).fill(UNSEEN);
    const queue: number[] = [];
    for (let i = 0; i < s.n; i++) {
      if (s.live(i) && (s.roots[i]! > 0 || s.statics[i]! > 0 || s.pins[i]! > 0)) {
        parent[i] = -1;
        queue.push(i);
      }
    }
    for (let q = 0; q < queue.length && parent[target] === UNSEEN; q++) {
      const v = queue[q]!;
      for (const slot of s.props(v)) {
        for (const t of slot.targets) {
          if (parent[t] !== UNSEEN) continue;
          parent[t] = v;
          queue.push(t);
        }
      }
    }
    if (parent[target] === UNSEEN) return { reachable: false, path: null };
    const path: string[] = [];
    for (let v = target; v >= 0; v = parent[v]!) path.push(s.ids[v]!);
    return { reachable: true, path: path.reverse() };
  }

  // ---------------------------------------------------------------- serialization

  /** The graph as JSON: objects (with the destroyed flag), references, roots, statics, subscriptions. */
  serialize(): GraphSnapshot {
    const objects: GraphSnapshot['objects'] = [];
    const roots: string[] = [];
    const subscriptions: GraphSnapshot['subscriptions'] = [];
    const s = this.#s;
    for (let i = 0; i < s.n; i++) {
      if (!s.live(i)) continue;
      const n = s.nodes[i]!;
      const o: GraphSnapshot['objects'][number] = { id: n.id, type: n.type };
      const owner = n.owner;
      if (owner) o.owner = owner.id;
      if (n.value !== undefined) {
        let toJSON: ((v: unknown) => Json) | undefined;
        for (const t of this.#chain(n.type)) {
          if (t.def.toJSON) {
            toJSON = t.def.toJSON;
            break;
          }
        }
        const json = toJSON ? toJSON(n.value) : n.value;
        const why = explainNotJson(json);
        if (why !== undefined) {
          throw new TypeError(
            `serialize: the value of ${n.id} is not JSON (${why}); give its type a toJSON`,
          );
        }
        o.value = json as Json;
      }
      if ((s.flags[i]! & DESTROYED) !== 0) o.destroyed = true;
      if (s.slotHead[i]! >= 0) {
        o.props = {};
        for (const slot of s.props(i)) {
          const ids = slot.targets.map((t) => s.ids[t]!);
          o.props[slot.name] = { kind: slot.kind, to: slot.list ? ids : (ids[0] ?? null) };
        }
      }
      objects.push(o);
      for (let k = 0; k < s.roots[i]!; k++) roots.push(n.id);
      for (const r of s.subscribersOf(i)) {
        const entry: GraphSnapshot['subscriptions'][number] = {
          publisher: n.id,
          subscriber: s.ids[s.deps[r * DS + D_SUB]!]!,
          count: s.deps[r * DS + D_COUNT]!,
        };
        const handler = s.handlers[r];
        if (typeof handler === 'string') entry.handler = handler;
        subscriptions.push(entry);
      }
    }
    const statics: GraphSnapshot['statics'] = [];
    for (const [key, n] of this.#statics) {
      const [type, name] = key.split('\u0000') as [string, string];
      statics.push({ type, name, to: n.id });
    }
    return { format: 'rigging.destroy-graph', version: 1, objects, roots, statics, subscriptions };
  }

  /**
   * Rebuilds a graph from {@link serialize}'s JSON; destroyed objects stay destroyed. Function
   * handlers are not serialized: subscribe with handler names to keep them.
   */
  static deserialize(snapshot: GraphSnapshot, options: ObjectGraphOptions = {}): ObjectGraph {
    const invalid = (why: string) =>
      new DestroyGraphError('destroy.invalid_snapshot', `invalid graph snapshot: ${why}`);
    if (snapshot?.format !== 'rigging.destroy-graph' || snapshot.version !== 1) {
      throw invalid('expected format rigging.destroy-graph, version 1');
    }
    const graph = new ObjectGraph(options);
    const byId = new Map<string, GraphSnapshot['objects'][number]>();
    for (const o of snapshot.objects) {
      if (typeof o?.id !== 'string' || typeof o.type !== 'string')
        throw invalid('an object lacks id or type');
      if (byId.has(o.id)) throw invalid(`duplicate id ${o.id}`);
      byId.set(o.id, o);
    }
    // Owners first, without recursion: add in an order where every owner precedes its objects.
    const added = new Set<string>();
    for (const o of snapshot.objects) {
      const chain: Array<GraphSnapshot['objects'][number]> = [];
      let cur: GraphSnapshot['objects'][number] | undefined = o;
      while (cur && !added.has(cur.id)) {
        if (chain.includes(cur)) throw invalid(`ownership cycle through ${cur.id}`);
        chain.push(cur);
        if (cur.owner === undefined) break;
        const next = byId.get(cur.owner);
        if (!next) throw invalid(`owner ${cur.owner} of ${cur.id} is missing`);
        cur = next;
      }
      for (let i = chain.length - 1; i >= 0; i--) {
        const x = chain[i]!;
        let fromJSON: ((j: Json) => unknown) | undefined;
        for (const t of graph.#chain(x.type)) {
          if (t.def.fromJSON) {
            fromJSON = t.def.fromJSON;
            break;
          }
        }
        const value = x.value === undefined ? undefined : fromJSON ? fromJSON(x.value) : x.value;
        const node = graph.add({ id: x.id, type: x.type, owner: x.owner ?? null, value }) as Node;
        if (x.destroyed) graph.#s.flags[node.i]! |= DESTROYED;
        added.add(x.id);
      }
    }
    const need = (id: string, what: string): Node => {
      const n = graph.#objects.get(id);
      if (!n) throw invalid(`${what} refers to missing object ${id}`);
      return n;
    };
    for (const o of snapshot.objects) {
      const node = need(o.id, 'object');
      for (const [name, p] of Object.entries(o.props ?? {})) {
        if (p.kind !== 'persistent' && p.kind !== 'runtime')
          throw invalid(`${o.id}.${name} has kind ${String(p.kind)}`);
        if (p.to === null) continue;
        const list = Array.isArray(p.to);
        const targets = (list ? (p.to as string[]) : [p.to as string]).map(
          (id) => need(id, `${o.id}.${name}`).i,
        );
        graph.#s.setProp(
          node.i,
          name,
          (p.kind === 'persistent' ? PERSISTENT : 0) | (list ? LIST : 0),
          targets,
        );
      }
    }
    for (const id of snapshot.roots ?? []) graph.#s.count(graph.#s.roots, need(id, 'roots').i, 1);
    for (const s of snapshot.statics ?? []) graph.setStatic(s.type, s.name, need(s.to, 'statics'));
    for (const s of snapshot.subscriptions ?? []) {
      const pub = need(s.publisher, 'subscription');
      const sub = need(s.subscriber, 'subscription');
      if (!(Number.isInteger(s.count) && s.count >= 1))
        throw invalid(`subscription count ${String(s.count)}`);
      graph.subscribeDestruction(pub, sub, s.handler);
      graph.#s.deps[graph.#s.findDep(pub.i, sub.i) * DS + D_COUNT] = s.count;
    }
    return graph;
  }
}

/** @internal live indices of `graph` in id order. */
export function idOrder(graph: ObjectGraph): Int32Array {
  return idOrderOf(graph);
}

/** @internal the arrays of `graph`. */
export function storeOf(graph: ObjectGraph): Store {
  return storeOfGraph(graph);
}

/** Runs `tasks` with at most `limit` at once; stops starting new ones once `signal` aborts. */
async function pool(
  tasks: Array<() => Promise<void>>,
  limit: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < tasks.length && !signal?.aborted) {
      const task = tasks[next++]!;
      await task();
    }
  };
  const workers: Array<Promise<void>> = [];
  for (let i = 0; i < Math.min(limit, tasks.length); i++) workers.push(worker());
  await Promise.all(workers);
}

/**
 * Objects present in a stored snapshot and missing from the incoming graph (the "offline"
 * removals), in snapshot order.
 */
export function diff(
  snapshot: GraphSnapshot,
  incoming: GraphSnapshot | Iterable<string>,
): string[] {
  const present = new Set<string>();
  if (isSnapshot(incoming)) for (const o of incoming.objects) present.add(o.id);
  else for (const id of incoming) present.add(id);
  return snapshot.objects.filter((o) => !present.has(o.id)).map((o) => o.id);
}

function isSnapshot(x: unknown): x is GraphSnapshot {
  return (
    typeof x === 'object' && x !== null && (x as GraphSnapshot).format === 'rigging.destroy-graph'
  );
}
