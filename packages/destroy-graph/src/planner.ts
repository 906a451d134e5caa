import { Arena } from './arena.js';
import { idOrder } from './id-order.js';
import { Layering, countingSort, layer, ownerDepths } from './layering.js';
import { DEPENDENCY, OWNER } from './plan.js';
import type { Csr, PlanCycle } from './plan.js';
import { DEP_NEXT_OUT, DEP_STRIDE, DEP_SUBSCRIBER, REMOVED } from './store.js';
import type { Store } from './store.js';
import type { Handle } from './types.js';

/**
 * @internal The arena and the growable arrays a graph's plans build their relation in, reused by
 * every plan of that graph: the graph owns one and passes it to {@link planIndices}.
 */
export class PlanScratch {
  readonly arena = new Arena();
  /** Local index → global index. */
  globalOf = new Int32Array(0);
  /** Local index → first edge (CSR offsets). */
  offsets = new Int32Array(0);
  /** Local index → local index of its owner, -1 for none. */
  ownerOf = new Int32Array(0);
  /** Edges: `(local target << 1) | OWNER or DEPENDENCY`. */
  targets = new Int32Array(1024);
  /** Local vertices (planned objects and placeholders) of the relation last built. */
  vertices = 0;
  /** Set while a plan runs: if one ever threw midway, `local` is reset before the next. */
  busy = false;

  /** Makes the per-vertex arrays hold at least `size` vertices. */
  reserve(size: number): this {
    if (this.globalOf.length < size) {
      const capacity = Math.max(64, size, this.globalOf.length * 2);
      this.globalOf = new Int32Array(capacity);
      this.offsets = new Int32Array(capacity);
      this.ownerOf = new Int32Array(capacity);
    }
    return this;
  }
}

/** @internal A plan's contents: the groups' handles, the cycles and the relation behind the edges. */
export interface PlanParts<H extends Handle> {
  groups: H[][];
  cycles: PlanCycle[];
  csr: Csr;
}

/**
 * @internal Plans the destruction of the objects at `input[0..count)` (global indices of live
 * objects, not destroyed; duplicates allowed). O(V+E) plus the listing: objects outside the plan
 * that relate two planned objects (an owner between them, a chain of dependencies) take part as
 * placeholders, so transitive relations are honoured without computing any closure. Everything
 * runs on integer arrays, in small monomorphic functions (each one a tight loop the JIT keeps
 * optimized); handles and ids are only read to list the result.
 */
export function planIndices<H extends Handle>(
  store: Store<H>,
  scratch: PlanScratch,
  input: Int32Array,
  count: number,
): PlanParts<H> {
  scratch.reserve(store.allocated + 1);
  const { arena, globalOf, ownerOf } = scratch;
  if (scratch.busy) store.local.fill(-1);
  scratch.busy = true;
  const planned = numberInput(input, count, store.local, globalOf);
  const edgeCount = buildRelation(store, scratch, planned);
  const vertices = scratch.vertices;
  const offsets = scratch.offsets.subarray(0, vertices + 1);
  const targets = scratch.targets.subarray(0, edgeCount);
  // Scratch: about 14 integers per vertex are alive at once at most (more chunks if needed).
  arena.reset(14 * vertices + 64);
  const depth = ownerDepths(vertices, ownerOf, arena);
  const layering = new Layering(arena, depth, arena.i32(vertices, -1), arena.i32(vertices, -1));
  const level = arena.raw(vertices);
  const levels = layer(vertices, offsets, targets, layering, level, null);
  // Compact the levels to groups of planned objects.
  const groupOf = new Int32Array(planned);
  const groupCount = groupsOfLevels(level, levels, planned, groupOf, arena);
  const { at, cycle } = listing(store, scratch, planned, groupOf, groupCount, layering);
  clearLocal(store.local, globalOf, vertices);
  scratch.busy = false;
  const sizes = arena.i32(groupCount);
  for (let vertex = 0; vertex < planned; vertex++) sizes[groupOf[vertex]!]!++;
  const cycles: PlanCycle[] = [];
  const groups = materialize(at, cycle, sizes, store, layering.ownership, cycles, arena);
  // What the plan keeps for its edges: ids of the local vertices and a copy of the relation.
  const ids = new Array<string>(vertices);
  for (let vertex = 0; vertex < vertices; vertex++) ids[vertex] = store.ids[globalOf[vertex]!]!;
  return {
    groups,
    cycles,
    csr: { ids, planned, off: offsets.slice(), tgt: targets.slice(), groupOf },
  };
}

/**
 * The listing: global index and cycle of each planned object, in plan order (each group by
 * ownership depth, deepest first, then id). For a large plan, one pass over the graph's cached id
 * order and stable counting sorts (by group and depth at once when the buckets are few) replace
 * sorting strings; small plans sort.
 */
function listing(
  store: Store,
  scratch: PlanScratch,
  planned: number,
  groupOf: Int32Array,
  groupCount: number,
  layering: Layering,
): { at: Int32Array; cycle: Int32Array } {
  const { arena, globalOf } = scratch;
  const depth = layering.depth;
  let maxDepth = 0;
  for (let vertex = 0; vertex < planned; vertex++) {
    if (depth[vertex]! > maxDepth) maxDepth = depth[vertex]!;
  }
  // One record per planned object, [sort key, global index, cycle], read together.
  const records = arena.raw(3 * planned);
  const composite = groupCount * (maxDepth + 1) <= 4 * planned + 1024;
  fillRecords(records, planned, groupOf, depth, maxDepth, composite, globalOf, layering.cycleOf);
  const at = arena.raw(planned);
  const cycle = arena.raw(planned);
  if (planned * 16 >= store.byId.size) {
    let order = arena.raw(planned);
    listInIdOrder(idOrder(store), store.local, planned, order);
    if (composite) {
      sortByRecord(order, records, groupCount * (maxDepth + 1), at, cycle, arena);
    } else {
      order = countingSort(order, depth, maxDepth, -1, maxDepth + 1, arena);
      order = countingSort(order, groupOf, 0, 1, groupCount, arena);
      fromRecords(order, records, at, cycle);
    }
  } else {
    const order = sortSmall(planned, groupOf, depth, globalOf, store.ids, arena);
    fromRecords(order, records, at, cycle);
  }
  return { at, cycle };
}

/** Local numbers for the planned objects, in input order; returns how many. */
function numberInput(
  input: Int32Array,
  count: number,
  local: Int32Array,
  globalOf: Int32Array,
): number {
  let numbered = 0;
  for (let k = 0; k < count; k++) {
    const global = input[k]!;
    if (local[global]! >= 0) continue;
    local[global] = numbered;
    globalOf[numbered++] = global;
  }
  return numbered;
}

function clearLocal(local: Int32Array, globalOf: Int32Array, vertices: number): void {
  for (let vertex = 0; vertex < vertices; vertex++) local[globalOf[vertex]!] = -1;
}

/**
 * The combined relation as CSR over local indices, with placeholders: everything reachable along
 * "destroyed before" edges (owners, subscribers). Objects are numbered when first seen and
 * processed in that order, so their edges are written in one pass. Returns the edge count; sets
 * `scratch.vertices`.
 */
function buildRelation(store: Store, scratch: PlanScratch, planned: number): number {
  const { globalOf, offsets, ownerOf } = scratch;
  const { local, owner, flags, outHead, outDegree, deps } = store;
  // Owners that left the graph are only possible until the next compaction.
  const anyRemoved = store.removed > 0;
  let targets = scratch.targets;
  let vertices = planned;
  let edges = 0;
  for (let vertex = 0; vertex < vertices; vertex++) {
    offsets[vertex] = edges;
    const global = globalOf[vertex]!;
    const need = edges + 1 + outDegree[global]!;
    if (need > targets.length) {
      const grown = new Int32Array(Math.max(targets.length * 2, need));
      grown.set(targets.subarray(0, edges));
      scratch.targets = targets = grown;
    }
    const globalOwner = owner[global]!;
    if (globalOwner >= 0 && (!anyRemoved || (flags[globalOwner]! & REMOVED) === 0)) {
      let localOwner = local[globalOwner]!;
      if (localOwner < 0) {
        localOwner = local[globalOwner] = vertices;
        globalOf[vertices++] = globalOwner;
      }
      ownerOf[vertex] = localOwner;
      targets[edges++] = (localOwner << 1) | OWNER;
    } else ownerOf[vertex] = -1;
    for (
      let record = outHead[global]!;
      record >= 0;
      record = deps[record * DEP_STRIDE + DEP_NEXT_OUT]!
    ) {
      const subscriber = deps[record * DEP_STRIDE + DEP_SUBSCRIBER]!;
      if (subscriber === global) continue;
      let localSubscriber = local[subscriber]!;
      if (localSubscriber < 0) {
        localSubscriber = local[subscriber] = vertices;
        globalOf[vertices++] = subscriber;
      }
      targets[edges++] = (localSubscriber << 1) | DEPENDENCY;
    }
  }
  offsets[vertices] = edges;
  scratch.vertices = vertices;
  return edges;
}

/** Numbers the levels holding planned objects 0, 1, …; writes each planned object's group. */
function groupsOfLevels(
  level: Int32Array,
  total: number,
  planned: number,
  groupOf: Int32Array,
  arena: Arena,
): number {
  const groupOfLevel = arena.i32(total, -1);
  for (let vertex = 0; vertex < planned; vertex++) groupOfLevel[level[vertex]!] = 0;
  let groupCount = 0;
  for (let levelIndex = 0; levelIndex < total; levelIndex++)
    if (groupOfLevel[levelIndex] === 0) groupOfLevel[levelIndex] = groupCount++ + 1;
  for (let vertex = 0; vertex < planned; vertex++)
    groupOf[vertex] = groupOfLevel[level[vertex]!]! - 1;
  return groupCount;
}

/** Records `[sort key, global index, cycle]` of the planned objects. */
function fillRecords(
  records: Int32Array,
  planned: number,
  groupOf: Int32Array,
  depth: Int32Array,
  maxDepth: number,
  composite: boolean,
  globalOf: Int32Array,
  cycleOf: Int32Array,
): void {
  const width = maxDepth + 1;
  for (let vertex = 0; vertex < planned; vertex++) {
    records[3 * vertex] = composite ? groupOf[vertex]! * width + maxDepth - depth[vertex]! : 0;
    records[3 * vertex + 1] = globalOf[vertex]!;
    records[3 * vertex + 2] = cycleOf[vertex]!;
  }
}

/**
 * A stable counting sort of `items` by their record's key (0 ≤ key < `buckets`), writing the
 * sorted items' global index and cycle (read from the same record) into `at` and `cycle`.
 */
function sortByRecord(
  items: Int32Array,
  records: Int32Array,
  buckets: number,
  at: Int32Array,
  cycle: Int32Array,
  arena: Arena,
): void {
  const count = arena.i32(buckets + 1);
  for (let position = 0; position < items.length; position++)
    count[records[3 * items[position]!]! + 1]!++;
  for (let bucket = 0; bucket < buckets; bucket++) count[bucket + 1]! += count[bucket]!;
  for (let position = 0; position < items.length; position++) {
    const record = 3 * items[position]!;
    const slot = count[records[record]!]!++;
    at[slot] = records[record + 1]!;
    cycle[slot] = records[record + 2]!;
  }
}

/** Global index and cycle of each item of `order`, from its record. */
function fromRecords(
  order: Int32Array,
  records: Int32Array,
  at: Int32Array,
  cycle: Int32Array,
): void {
  for (let position = 0; position < order.length; position++) {
    const record = 3 * order[position]!;
    at[position] = records[record + 1]!;
    cycle[position] = records[record + 2]!;
  }
}

/**
 * The groups' handles (group g is the next `sizes[g]` objects of the listing), and the reported
 * cycles: those with planned members, in plan order of their first member; members in plan
 * order.
 */
function materialize<H extends Handle>(
  at: Int32Array,
  cycle: Int32Array,
  sizes: Int32Array,
  store: Store<H>,
  ownership: readonly boolean[],
  cycles: PlanCycle[],
  arena: Arena,
): H[][] {
  const { nodes, ids } = store;
  const reported = arena.i32(ownership.length, -1);
  const groups: H[][] = [];
  let position = 0;
  for (let group = 0; group < sizes.length; group++) {
    const size = sizes[group]!;
    const members = new Array<H>(size);
    for (let k = 0; k < size; k++, position++) {
      const global = at[position]!;
      members[k] = nodes[global]!;
      const cycleId = cycle[position]!;
      if (cycleId < 0) continue;
      let entry: PlanCycle;
      if (reported[cycleId]! < 0) {
        reported[cycleId] = cycles.length;
        entry = { objects: [], groups: [], ownership: ownership[cycleId]! };
        cycles.push(entry);
      } else entry = cycles[reported[cycleId]!]!;
      entry.objects.push(ids[global]!);
      if (entry.groups[entry.groups.length - 1] !== group) entry.groups.push(group);
    }
    groups.push(members);
  }
  return groups;
}

/** The planned local vertices in id order (from the graph's cached order of global indices). */
function listInIdOrder(
  sorted: Int32Array,
  local: Int32Array,
  planned: number,
  order: Int32Array,
): void {
  let written = 0;
  for (let at = 0; at < sorted.length; at++) {
    const vertex = local[sorted[at]!]!;
    if (vertex >= 0 && vertex < planned) order[written++] = vertex;
  }
}

/** Small plans: sort by group, ownership depth (deepest first), id. */
function sortSmall(
  planned: number,
  groupOf: Int32Array,
  depth: Int32Array,
  globalOf: Int32Array,
  ids: readonly string[],
  arena: Arena,
): Int32Array {
  const list: number[] = [];
  for (let vertex = 0; vertex < planned; vertex++) list.push(vertex);
  list.sort((left, right) => {
    const byGroup = groupOf[left]! - groupOf[right]!;
    if (byGroup !== 0) return byGroup;
    const byDepth = depth[right]! - depth[left]!;
    if (byDepth !== 0) return byDepth;
    const leftId = ids[globalOf[left]!]!;
    const rightId = ids[globalOf[right]!]!;
    return leftId < rightId ? -1 : leftId > rightId ? 1 : 0;
  });
  const order = arena.i32(planned);
  order.set(list);
  return order;
}
