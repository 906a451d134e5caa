import { DEP_PUBLISHER, DEP_STRIDE, DEP_SUBSCRIBER, REMOVED } from './store.js';
import type { Store } from './store.js';

/**
 * @internal Renumbers the live indices densely (keeping their order) and drops removed ones; returns the
 * old → new map (-1 for removed). Records keep their place, so every order is kept.
 */
export function compact(store: Store): Int32Array {
  const allocated = store.allocated;
  const renumbered = new Int32Array(allocated).fill(-1);
  let live = 0;
  for (let index = 0; index < allocated; index++) {
    if ((store.flags[index]! & REMOVED) === 0) renumbered[index] = live++;
  }
  for (const key of PER_INDEX) {
    const array = store[key];
    for (let index = 0; index < allocated; index++) {
      if (renumbered[index]! >= 0) array[renumbered[index]!] = array[index]!;
    }
  }
  for (let index = 0; index < allocated; index++) {
    const to = renumbered[index]!;
    if (to < 0) continue;
    const owner = store.owner[index]!;
    store.owner[to] = owner >= 0 ? renumbered[owner]! : -1;
    store.nodes[to] = store.nodes[index];
    store.ids[to] = store.ids[index]!;
    store.nodes[to]!.index = to;
  }
  store.nodes.length = live;
  store.ids.length = live;
  store.owner.fill(-1, live);
  for (const key of PER_INDEX) {
    store[key].fill(key.endsWith('Head') || key.endsWith('Tail') ? -1 : 0, live);
  }
  store.mark.fill(0);
  store.local.fill(-1);
  store.renumberTargets(renumbered, live);
  const deps = store.deps;
  for (let record = 0; record < store.depTop; record++) {
    const base = record * DEP_STRIDE;
    if (deps[base + DEP_PUBLISHER]! < 0) continue;
    deps[base + DEP_PUBLISHER] = renumbered[deps[base + DEP_PUBLISHER]!]!;
    deps[base + DEP_SUBSCRIBER] = renumbered[deps[base + DEP_SUBSCRIBER]!]!;
  }
  let kept = 0;
  const sorted = store.sorted;
  for (let at = 0; at < sorted.length; at++) {
    const to = renumbered[sorted[at]!]!;
    if (to >= 0) sorted[kept++] = to;
  }
  store.sorted = sorted.slice(0, kept);
  store.keepers = new Set([...store.keepers].map((index) => renumbered[index]!));
  store.pinned = new Set([...store.pinned].map((index) => renumbered[index]!));
  let upTo = 0;
  for (let index = 0; index < store.sortedUpTo; index++) if (renumbered[index]! >= 0) upTo++;
  store.sortedUpTo = upTo;
  store.allocated = live;
  store.removed = 0;
  return renumbered;
}

/** The per-index arrays that compaction moves as they are. */
const PER_INDEX = [
  'flags',
  'roots',
  'statics',
  'pins',
  'slotHead',
  'outHead',
  'outTail',
  'inHead',
  'inTail',
  'outDegree',
  'inDegree',
] as const;
