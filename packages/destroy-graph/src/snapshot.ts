import { explainNotJson } from '@rigging/core';
import type { Json } from '@rigging/core';
import { DestroyGraphError } from './errors.js';
import type { TypeRegistry } from './registry.js';
import { DESTROYED, LIST, PERSISTENT } from './store.js';
import type { Store } from './store.js';
import type { GraphSnapshot, Handle } from './types.js';

type SnapshotObject = GraphSnapshot['objects'][number];

/** @internal The JSON form of a graph's store (`ObjectGraph.serialize`). */
export function serializeStore(
  store: Store,
  registry: TypeRegistry,
  statics: ReadonlyMap<string, Handle>,
): GraphSnapshot {
  const objects: GraphSnapshot['objects'] = [];
  const roots: string[] = [];
  const subscriptions: GraphSnapshot['subscriptions'] = [];
  for (let index = 0; index < store.allocated; index++) {
    if (!store.live(index)) continue;
    const node = store.nodes[index]!;
    const object: SnapshotObject = { id: node.id, type: node.type };
    const owner = node.owner;
    if (owner) object.owner = owner.id;
    if (node.value !== undefined) object.value = valueJson(node, registry);
    if ((store.flags[index]! & DESTROYED) !== 0) object.destroyed = true;
    if (store.slotHead[index]! >= 0) {
      object.props = {};
      for (const property of store.props(index)) {
        const ids = property.targets.map((target) => store.ids[target]!);
        object.props[property.name] = {
          kind: property.kind,
          to: property.list ? ids : (ids[0] ?? null),
        };
      }
    }
    objects.push(object);
    for (let k = 0; k < store.roots[index]!; k++) roots.push(node.id);
    for (const record of store.subscriptionsOf(index)) {
      const entry: GraphSnapshot['subscriptions'][number] = {
        publisher: node.id,
        subscriber: store.ids[store.subscriberOf(record)]!,
        count: store.depCount(record),
      };
      const handler = store.handlers[record];
      if (typeof handler === 'string') entry.handler = handler;
      subscriptions.push(entry);
    }
  }
  const staticList: GraphSnapshot['statics'] = [];
  for (const [key, node] of statics) {
    const [type, name] = key.split('\u0000') as [string, string];
    staticList.push({ type, name, to: node.id });
  }
  return {
    format: 'rigging.destroy-graph',
    version: 1,
    objects,
    roots,
    statics: staticList,
    subscriptions,
  };
}

function valueJson(node: Handle, registry: TypeRegistry): Json {
  const toJSON = registry.toJSON(node.type);
  const json = toJSON ? toJSON(node.value) : node.value;
  const why = explainNotJson(json);
  if (why !== undefined) {
    throw new TypeError(
      `serialize: the value of ${node.id} is not JSON (${why}); give its type a toJSON`,
    );
  }
  return json as Json;
}

function invalid(why: string): DestroyGraphError {
  return new DestroyGraphError('destroy-graph.invalid_snapshot', `invalid graph snapshot: ${why}`);
}

/**
 * @internal What restoring a snapshot does through the graph (its checks included), rather than
 * on the store alone: add an object, set a static, subscribe.
 */
export interface SnapshotTarget<H extends Handle> {
  add(object: { id: string; type: string; owner: string | null; value: unknown }): H;
  setStatic(type: string, name: string, target: H): void;
  subscribeDestruction(publisher: H, subscriber: H, handler: string | undefined): void;
}

/**
 * @internal Fills the empty `graph` (whose arrays are `store`) from a snapshot: objects (owners
 * first), destroyed flags, properties, roots, statics and subscriptions.
 */
export function restoreSnapshot<H extends Handle>(
  graph: SnapshotTarget<H>,
  store: Store<H>,
  registry: TypeRegistry,
  snapshot: GraphSnapshot,
): void {
  if (snapshot?.format !== 'rigging.destroy-graph' || snapshot.version !== 1) {
    throw invalid('expected format rigging.destroy-graph, version 1');
  }
  addObjects(graph, store, registry, snapshot.objects);
  const need = (id: string, what: string): H => {
    const node = store.byId.get(id);
    if (!node) throw invalid(`${what} refers to missing object ${id}`);
    return node;
  };
  for (const object of snapshot.objects) {
    const node = need(object.id, 'object');
    for (const [name, property] of Object.entries(object.props ?? {})) {
      if (property.kind !== 'persistent' && property.kind !== 'runtime') {
        throw invalid(`${object.id}.${name} has kind ${String(property.kind)}`);
      }
      if (property.to === null) continue;
      const list = Array.isArray(property.to);
      const targets = (list ? (property.to as string[]) : [property.to as string]).map(
        (id) => need(id, `${object.id}.${name}`).index,
      );
      const meta = (property.kind === 'persistent' ? PERSISTENT : 0) | (list ? LIST : 0);
      store.setProp(node.index, name, meta, targets);
    }
  }
  for (const id of snapshot.roots ?? []) store.count(store.roots, need(id, 'roots').index, 1);
  for (const entry of snapshot.statics ?? []) {
    graph.setStatic(entry.type, entry.name, need(entry.to, 'statics'));
  }
  for (const entry of snapshot.subscriptions ?? []) {
    const publisher = need(entry.publisher, 'subscription');
    const subscriber = need(entry.subscriber, 'subscription');
    if (!(Number.isInteger(entry.count) && entry.count >= 1)) {
      throw invalid(`subscription count ${String(entry.count)}`);
    }
    graph.subscribeDestruction(publisher, subscriber, entry.handler);
    store.setDepCount(store.findDep(publisher.index, subscriber.index), entry.count);
  }
}

/** Adds the snapshot's objects, without recursion, in an order where owners come first. */
function addObjects<H extends Handle>(
  graph: SnapshotTarget<H>,
  store: Store<H>,
  registry: TypeRegistry,
  objects: readonly SnapshotObject[],
): void {
  const byId = new Map<string, SnapshotObject>();
  for (const object of objects) {
    if (typeof object?.id !== 'string' || typeof object.type !== 'string') {
      throw invalid('an object lacks id or type');
    }
    if (byId.has(object.id)) throw invalid(`duplicate id ${object.id}`);
    byId.set(object.id, object);
  }
  const added = new Set<string>();
  for (const object of objects) {
    const chain: SnapshotObject[] = [];
    let current: SnapshotObject | undefined = object;
    while (current && !added.has(current.id)) {
      if (chain.includes(current)) throw invalid(`ownership cycle through ${current.id}`);
      chain.push(current);
      if (current.owner === undefined) break;
      const owner = byId.get(current.owner);
      if (!owner) throw invalid(`owner ${current.owner} of ${current.id} is missing`);
      current = owner;
    }
    for (let k = chain.length - 1; k >= 0; k--) {
      const entry = chain[k]!;
      const fromJSON = registry.fromJSON(entry.type);
      const value =
        entry.value === undefined ? undefined : fromJSON ? fromJSON(entry.value) : entry.value;
      const node = graph.add({ id: entry.id, type: entry.type, owner: entry.owner ?? null, value });
      if (entry.destroyed) store.flags[node.index]! |= DESTROYED;
      added.add(entry.id);
    }
  }
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
  if (isSnapshot(incoming)) for (const object of incoming.objects) present.add(object.id);
  else for (const id of incoming) present.add(id);
  return snapshot.objects.filter((object) => !present.has(object.id)).map((object) => object.id);
}

function isSnapshot(value: unknown): value is GraphSnapshot {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as GraphSnapshot).format === 'rigging.destroy-graph'
  );
}
