import type { Store } from './store.js';

/**
 * @internal Live indices in id order: the cached order, merged with the objects added since (indices
 * grow with insertion, so those are the indices from `sortedUpTo` on).
 */
export function idOrder(store: Store): Int32Array {
  if (store.sortedUpTo === store.allocated) return store.sorted;
  const fresh: string[] = [];
  for (let index = store.sortedUpTo; index < store.allocated; index++) {
    if (store.live(index)) fresh.push(store.ids[index]!);
  }
  // Sorting the strings natively is much faster than a comparator over indices.
  fresh.sort();
  const old = store.sorted;
  const merged = new Int32Array(old.length + fresh.length);
  let oldAt = 0;
  let freshAt = 0;
  let written = 0;
  while (oldAt < old.length || freshAt < fresh.length) {
    const oldIndex = old[oldAt];
    if (oldIndex !== undefined && !store.live(oldIndex)) {
      oldAt++;
      continue;
    }
    const freshId = fresh[freshAt];
    if (freshId === undefined || (oldIndex !== undefined && store.ids[oldIndex]! < freshId)) {
      merged[written++] = oldIndex!;
      oldAt++;
    } else {
      merged[written++] = store.byId.get(freshId)!.index;
      freshAt++;
    }
  }
  store.sorted = merged.subarray(0, written);
  store.sortedUpTo = store.allocated;
  return store.sorted;
}
