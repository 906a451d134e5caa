import { DESTROYED, DOOMED } from './store.js';
import type { Store } from './store.js';
import type { Explanation, Handle } from './types.js';

/** @internal Why `node` is or is not going to be destroyed, and what orders its destruction. */
export function explainNode(store: Store, node: Handle): Explanation {
  const me = node.index;
  const persistent = store.reach(false);
  const persistentlyReachable = store.mark[me] === persistent;
  const { reachable, path } = pathTo(store, me);
  const referencedBy: Explanation['referencedBy'] = [];
  const after: Explanation['after'] = [];
  for (let index = 0; index < store.allocated; index++) {
    if (!store.live(index)) continue;
    if (store.owner[index] === me) after.push({ id: store.ids[index]!, reason: 'owns' });
    if (store.slotHead[index]! < 0) continue;
    for (const property of store.props(index)) {
      if (property.targets.includes(me)) {
        referencedBy.push({ id: store.ids[index]!, property: property.name, kind: property.kind });
      }
    }
  }
  for (const record of store.publicationsOf(me)) {
    const publisher = store.publisherOf(record);
    if (publisher !== me) after.push({ id: store.ids[publisher]!, reason: 'depends on' });
  }
  const before: Explanation['before'] = [];
  const owner = node.owner;
  if (owner) before.push({ id: owner.id, reason: 'owned by' });
  for (const record of store.subscriptionsOf(me)) {
    const subscriber = store.subscriberOf(record);
    if (subscriber !== me) before.push({ id: store.ids[subscriber]!, reason: 'dependency of' });
  }
  const flags = store.flags[me]!;
  const state =
    (flags & DESTROYED) !== 0 ? 'destroyed' : (flags & DOOMED) !== 0 ? 'doomed' : 'live';
  const collectedBy: Explanation['collectedBy'] = [];
  if (state === 'live') {
    if (!persistentlyReachable) collectedBy.push('persistent');
    if (!reachable) collectedBy.push('complete');
  }
  const explanation: Explanation = {
    id: node.id,
    type: node.type,
    state,
    root: store.roots[me]! > 0,
    static: store.statics[me]! > 0,
    pins: store.pins[me]!,
    persistentlyReachable,
    reachable,
    path,
    referencedBy,
    collectedBy,
    after,
    before,
    text: '',
  };
  explanation.text = sentence(explanation);
  return explanation;
}

/** The explanation in a sentence or two. */
function sentence(explanation: Explanation): string {
  const { state, reachable, persistentlyReachable, path, after, before } = explanation;
  const parts: string[] = [];
  const name = `${explanation.id} (${explanation.type})`;
  if (state === 'destroyed') {
    parts.push(`${name} is destroyed${reachable ? ' and kept: it is reachable again' : ''}.`);
  } else if (state === 'doomed') parts.push(`${name} is being destroyed by a running plan.`);
  else if (!reachable) parts.push(`${name} is unreachable: any collection destroys it.`);
  else if (!persistentlyReachable) {
    parts.push(
      `${name} is kept by runtime references or pins only (${path?.join(' -> ')}): a persistent collection destroys it.`,
    );
  } else {
    parts.push(
      `${name} is kept alive by ${path && path.length > 1 ? path.join(' -> ') : 'being a root'}.`,
    );
  }
  if (after.length > 0) {
    parts.push(`It goes after ${after.map((a) => `${a.id} (${a.reason} it)`).join(', ')}.`);
  }
  if (before.length > 0) {
    parts.push(`It goes before ${before.map((b) => `${b.id} (${b.reason} it)`).join(', ')}.`);
  }
  return parts.join(' ');
}

/** A shortest chain of references from a root, static or pin to `target` (breadth first). */
function pathTo(store: Store, target: number): { reachable: boolean; path: string[] | null } {
  const UNSEEN = -2;
  const parent = new Int32Array(store.allocated).fill(UNSEEN);
  const queue: number[] = [];
  for (let index = 0; index < store.allocated; index++) {
    const kept = store.roots[index]! > 0 || store.statics[index]! > 0 || store.pins[index]! > 0;
    if (store.live(index) && kept) {
      parent[index] = -1;
      queue.push(index);
    }
  }
  for (let head = 0; head < queue.length && parent[target] === UNSEEN; head++) {
    const from = queue[head]!;
    for (const property of store.props(from)) {
      for (const to of property.targets) {
        if (parent[to] !== UNSEEN) continue;
        parent[to] = from;
        queue.push(to);
      }
    }
  }
  if (parent[target] === UNSEEN) return { reachable: false, path: null };
  const path: string[] = [];
  for (let at = target; at >= 0; at = parent[at]!) path.push(store.ids[at]!);
  return { reachable: true, path: path.reverse() };
}
