import type { ObjectGraph } from './graph.js';
import { idOrder } from './graph.js';
import type { GraphObject, Node } from './node.js';
import { DS, D_NOUT, D_SUB, REMOVED } from './store.js';
import type { Store } from './store.js';

/** Why `after` is destroyed after `before`. */
export type EdgeReason = 'owner' | 'dependency';

/** One ordering constraint between two planned objects. */
export interface PlanEdge {
  /** Destroyed first. */
  before: string;
  /** Destroyed later. */
  after: string;
  /** `owner`: `after` owns `before`; `dependency`: `after` subscribed to `before`'s destruction. */
  reason: EdgeReason;
  /** True when the relation goes through objects that are not in the plan. */
  transitive: boolean;
  /** False only inside a reported cycle, where the tie order had to break the edge. */
  satisfied: boolean;
}

/** A strongly connected set of planned objects (ownership + dependency cycle). */
export interface PlanCycle {
  /** Planned objects of the cycle, in destruction order (ownership depth, deepest first, then id). */
  objects: string[];
  /** Plan groups the cycle's objects were put in. */
  groups: number[];
  /** True when ownership edges take part in the cycle (a dependency against ownership). */
  ownership: boolean;
}

/** The JSON form of a {@link DestructionPlan} (`JSON.stringify(plan)`). */
export interface PlanJSON {
  format: 'rigging.destroy-plan';
  version: 1;
  objects: number;
  groups: Array<{ index: number; objects: Array<{ id: string; type: string }> }>;
  cycles: PlanCycle[];
  edges: PlanEdge[];
}

/**
 * The order in which a set of objects will be destroyed: groups destroyed one after the other,
 * objects within a group in parallel. Data only: nothing has happened yet.
 */
export class DestructionPlan {
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

  toJSON(): PlanJSON {
    return {
      format: 'rigging.destroy-plan',
      version: 1,
      objects: this.size,
      groups: this.groups.map((objects, index) => ({
        index,
        objects: objects.map((o) => ({ id: o.id, type: o.type })),
      })),
      cycles: this.cycles.map((c) => ({ ...c })),
      edges: this.edges.map((e) => ({ ...e })),
    };
  }

  /** A readable listing: one line per object, with what it waits for and why. */
  format(): string {
    const incoming = new Map<string, PlanEdge[]>();
    for (const e of this.edges) {
      let list = incoming.get(e.after);
      if (!list) incoming.set(e.after, (list = []));
      list.push(e);
    }
    const lines = [
      `destruction plan: ${this.size} object(s) in ${this.groups.length} group(s), ${this.cycles.length} cycle(s)`,
    ];
    this.groups.forEach((objects, index) => {
      lines.push(`group ${index}${objects.length > 1 ? ' (in parallel)' : ''}`);
      for (const o of objects) {
        const waits = incoming.get(o.id) ?? [];
        const why = waits
          .map(
            (e) =>
              `${e.before} [${e.reason === 'owner' ? 'owns it' : 'depends on it'}${e.transitive ? ', transitively' : ''}${e.satisfied ? '' : ', broken by cycle'}]`,
          )
          .join(', ');
        lines.push(`  ${o.id} (${o.type})${why ? `  after ${why}` : ''}`);
      }
    });
    this.cycles.forEach((c, i) => {
      lines.push(
        `cycle ${i + 1}: ${c.objects.join(', ')} (${c.ownership ? 'dependency against ownership' : 'circular dependency'}; tie order: ownership depth, then id)`,
      );
    });
    return lines.join('\n');
  }

  toString(): string {
    return this.format();
  }
}

/**
 * @internal the plan's combined relation, kept for {@link DestructionPlan.edges}: local index →
 * id (planned objects first, then the objects outside the plan that relate them); edge e of v
 * goes v → `tgt[e] >> 1` ("v before"), its low bit is its kind (0 owner, 1 dependency).
 */
interface Csr {
  ids: string[];
  planned: number;
  off: Int32Array;
  tgt: Int32Array;
  groupOf: Int32Array;
}

/**
 * Scratch integers for planning, reused from one plan of a graph to the next: fresh typed arrays
 * of a million entries per plan count as external memory and make V8 start full collections of
 * the (large) heap. Bump allocation; sized to the largest plan seen.
 */
class Arena {
  /** Chunks, kept from plan to plan. */
  #chunks: Int32Array[] = [new Int32Array(4096)];
  #chunk = 0;
  #used = 0;

  /** Starts a plan that will need about `n` integers at most at once. */
  reset(n: number): void {
    if (this.#chunks[0]!.length < n) this.#chunks = [new Int32Array(n)];
    this.#chunk = 0;
    this.#used = 0;
  }

  /** `n` integers set to `value`, valid until the next reset or a release of an earlier mark. */
  i32(n: number, value = 0): Int32Array {
    let buf = this.#chunks[this.#chunk]!;
    while (this.#used + n > buf.length) {
      this.#chunk++;
      this.#used = 0;
      if (this.#chunk === this.#chunks.length) {
        this.#chunks.push(new Int32Array(Math.max(n, buf.length)));
      }
      buf = this.#chunks[this.#chunk]!;
    }
    const a = buf.subarray(this.#used, this.#used + n);
    this.#used += n;
    a.fill(value);
    return a;
  }

  /** Like {@link i32} without the fill: for arrays written before they are read. */
  raw(n: number): Int32Array {
    let buf = this.#chunks[this.#chunk]!;
    while (this.#used + n > buf.length) {
      this.#chunk++;
      this.#used = 0;
      if (this.#chunk === this.#chunks.length) {
        this.#chunks.push(new Int32Array(Math.max(n, buf.length)));
      }
      buf = this.#chunks[this.#chunk]!;
    }
    const a = buf.subarray(this.#used, this.#used + n);
    this.#used += n;
    return a;
  }

  mark(): number {
    return this.#chunk * 2 ** 32 + this.#used;
  }

  /** Frees everything allocated since `mark` (stack discipline). */
  release(mark: number): void {
    this.#chunk = Math.floor(mark / 2 ** 32);
    this.#used = mark % 2 ** 32;
  }
}

/** Per graph: the arena and the growable arrays the relation is built in (reused by every plan). */
interface Scratch {
  arena: Arena;
  /** Local index → global index. */
  glob: Int32Array;
  off: Int32Array;
  ownerOf: Int32Array;
  tgt: Int32Array;
  /** Local vertices (planned objects and placeholders) of the relation last built. */
  n: number;
  /** Set while a plan runs: if one ever threw midway, `local` is reset before the next. */
  busy: boolean;
}

const scratches = new WeakMap<ObjectGraph, Scratch>();

const OWNER = 0;
const DEPENDENCY = 1;

/**
 * Plans the destruction of the objects at `input[0..count)` (global indices of live objects, not
 * destroyed; duplicates allowed). O(V+E) plus the listing: objects outside the plan that relate
 * two planned objects (an owner between them, a chain of dependencies) take part as
 * placeholders, so transitive relations are honoured without computing any closure. Everything
 * runs on integer arrays, in small monomorphic functions (each one a tight loop the JIT keeps
 * optimized); handles and ids are only read to list the result.
 */
export function planNodes(
  graph: ObjectGraph,
  s: Store,
  input: Int32Array,
  count: number,
): DestructionPlan {
  const scratch = scratchOf(graph, s.n + 1);
  const { arena, glob, ownerOf } = scratch;
  if (scratch.busy) s.local.fill(-1);
  scratch.busy = true;
  const planned = numberInput(input, count, s.local, glob);
  const e = buildRelation(s, scratch, planned);
  const n = scratch.n;
  const off = scratch.off.subarray(0, n + 1);
  const tgt = scratch.tgt.subarray(0, e);
  // Scratch: about 14 integers per vertex are alive at once at most (more chunks if needed).
  arena.reset(14 * n + 64);
  const depth = ownerDepths(n, ownerOf, arena);
  const ctx = new Layering(arena, depth, arena.i32(n, -1), arena.i32(n, -1));
  const level = arena.raw(n);
  const total = layer(n, off, tgt, ctx, level, null);
  // Compact the levels to groups of planned objects.
  const groupOf = new Int32Array(planned);
  const groupCount = groupsOfLevels(level, total, planned, groupOf, arena);
  // List each group by ownership depth (deepest first), then id: for a large plan, one pass over
  // the graph's cached id order and stable counting sorts (by group and depth at once when the
  // buckets are few) replace sorting strings; small plans sort.
  let maxDepth = 0;
  for (let v = 0; v < planned; v++) if (depth[v]! > maxDepth) maxDepth = depth[v]!;
  // One record per planned object, [sort key, global index, cycle], read together.
  const rec = arena.raw(3 * planned);
  const composite = groupCount * (maxDepth + 1) <= 4 * planned + 1024;
  fillRecords(rec, planned, groupOf, depth, maxDepth, composite, glob, ctx.cycleOf);
  // The listing: global index and cycle of each planned object, in plan order.
  const at = arena.raw(planned);
  const cycle = arena.raw(planned);
  if (planned * 16 >= graph.size) {
    let order = arena.raw(planned);
    listInIdOrder(idOrder(graph), s.local, planned, order);
    if (composite) sortByRecord(order, rec, groupCount * (maxDepth + 1), at, cycle, arena);
    else {
      order = countingSort(order, depth, maxDepth, -1, maxDepth + 1, arena);
      order = countingSort(order, groupOf, 0, 1, groupCount, arena);
      fromRecords(order, rec, at, cycle);
    }
  } else {
    fromRecords(sortSmall(planned, groupOf, depth, glob, s.ids, arena), rec, at, cycle);
  }
  clearLocal(s.local, glob, n);
  scratch.busy = false;
  const sizes = arena.i32(groupCount);
  for (let v = 0; v < planned; v++) sizes[groupOf[v]!]!++;
  const cycles: PlanCycle[] = [];
  const groups = materialize(at, cycle, sizes, s.nodes, s.ids, ctx.ownership, cycles, arena);
  // What the plan keeps for its edges: ids of the local vertices and a copy of the relation.
  const ids = new Array<string>(n);
  for (let i = 0; i < n; i++) ids[i] = s.ids[glob[i]!]!;
  return new DestructionPlan(graph, groups, cycles, {
    ids,
    planned,
    off: off.slice(),
    tgt: tgt.slice(),
    groupOf,
  });
}

function scratchOf(graph: ObjectGraph, size: number): Scratch {
  let scratch = scratches.get(graph);
  if (!scratch) {
    scratch = {
      arena: new Arena(),
      glob: new Int32Array(0),
      off: new Int32Array(0),
      ownerOf: new Int32Array(0),
      tgt: new Int32Array(1024),
      n: 0,
      busy: false,
    };
    scratches.set(graph, scratch);
  }
  if (scratch.glob.length < size) {
    const cap = Math.max(64, size, scratch.glob.length * 2);
    scratch.glob = new Int32Array(cap);
    scratch.off = new Int32Array(cap);
    scratch.ownerOf = new Int32Array(cap);
  }
  return scratch;
}

/** Local numbers for the planned objects, in input order; returns how many. */
function numberInput(
  input: Int32Array,
  count: number,
  local: Int32Array,
  glob: Int32Array,
): number {
  let n = 0;
  for (let k = 0; k < count; k++) {
    const g = input[k]!;
    if (local[g]! >= 0) continue;
    local[g] = n;
    glob[n++] = g;
  }
  return n;
}

function clearLocal(local: Int32Array, glob: Int32Array, n: number): void {
  for (let i = 0; i < n; i++) local[glob[i]!] = -1;
}

/**
 * The combined relation as CSR over local indices, with placeholders: everything reachable along
 * "destroyed before" edges (owners, subscribers). Objects are numbered when first seen and
 * processed in that order, so their edges are written in one pass. Returns the edge count; sets
 * `scratch.n`.
 */
function buildRelation(s: Store, scratch: Scratch, planned: number): number {
  const { glob, off, ownerOf } = scratch;
  const { local, owner, flags, outHead, outDeg, deps } = s;
  // Owners that left the graph are only possible until the next compaction.
  const anyRemoved = s.removed > 0;
  let tgt = scratch.tgt;
  let n = planned;
  let e = 0;
  for (let i = 0; i < n; i++) {
    off[i] = e;
    const g = glob[i]!;
    if (e + 1 + outDeg[g]! > tgt.length) {
      const t = new Int32Array(Math.max(tgt.length * 2, e + 1 + outDeg[g]!));
      t.set(tgt.subarray(0, e));
      scratch.tgt = tgt = t;
    }
    const o = owner[g]!;
    if (o >= 0 && (!anyRemoved || (flags[o]! & REMOVED) === 0)) {
      let lo = local[o]!;
      if (lo < 0) {
        lo = local[o] = n;
        glob[n++] = o;
      }
      ownerOf[i] = lo;
      tgt[e++] = (lo << 1) | OWNER;
    } else ownerOf[i] = -1;
    for (let r = outHead[g]!; r >= 0; r = deps[r * DS + D_NOUT]!) {
      const w = deps[r * DS + D_SUB]!;
      if (w === g) continue;
      let lw = local[w]!;
      if (lw < 0) {
        lw = local[w] = n;
        glob[n++] = w;
      }
      tgt[e++] = (lw << 1) | DEPENDENCY;
    }
  }
  off[n] = e;
  scratch.n = n;
  return e;
}

/** What layering needs besides the relation (a class: one shape for every helper). */
class Layering {
  /** Per reported cycle: whether ownership edges take part in it. */
  readonly ownership: boolean[] = [];
  constructor(
    readonly arena: Arena,
    /** Ownership depth of each local vertex. */
    readonly depth: Int32Array,
    /** Cycle of each local vertex, -1 for none. */
    readonly cycleOf: Int32Array,
    /** Scratch: index of a vertex within the cycle being split, -1 otherwise. */
    readonly inCycle: Int32Array,
  ) {}
}

/** Ownership depth of every vertex from its owner's index (-1: none), iteratively, in O(n). */
function ownerDepths(n: number, ownerOf: Int32Array, arena: Arena): Int32Array {
  const depth = arena.i32(n, -1);
  const mark = arena.mark();
  const chain = arena.raw(n);
  for (let i = 0; i < n; i++) {
    if (depth[i]! >= 0) continue;
    let c = 0;
    let u = i;
    while (u >= 0 && depth[u]! < 0) {
      chain[c++] = u;
      u = ownerOf[u]!;
    }
    let d = u >= 0 ? depth[u]! + 1 : 0;
    while (c > 0) depth[chain[--c]!] = d++;
  }
  arena.release(mark);
  return depth;
}

/**
 * A stable counting sort of `items` by key `base + sign * keys[v]` (0 ≤ key < `buckets`).
 */
function countingSort(
  items: Int32Array,
  keys: Int32Array,
  base: number,
  sign: number,
  buckets: number,
  arena: Arena,
): Int32Array {
  const count = arena.i32(buckets + 1);
  for (let i = 0; i < items.length; i++) count[base + sign * keys[items[i]!]! + 1]!++;
  for (let b = 0; b < buckets; b++) count[b + 1]! += count[b]!;
  const out = arena.raw(items.length);
  for (let i = 0; i < items.length; i++) {
    const v = items[i]!;
    out[count[base + sign * keys[v]!]!++] = v;
  }
  return out;
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
  for (let v = 0; v < planned; v++) groupOfLevel[level[v]!] = 0;
  let groupCount = 0;
  for (let l = 0; l < total; l++) if (groupOfLevel[l] === 0) groupOfLevel[l] = groupCount++ + 1;
  for (let v = 0; v < planned; v++) groupOf[v] = groupOfLevel[level[v]!]! - 1;
  return groupCount;
}

/** Records `[sort key, global index, cycle]` of the planned objects. */
function fillRecords(
  rec: Int32Array,
  planned: number,
  groupOf: Int32Array,
  depth: Int32Array,
  maxDepth: number,
  composite: boolean,
  glob: Int32Array,
  cycleOf: Int32Array,
): void {
  const width = maxDepth + 1;
  for (let v = 0; v < planned; v++) {
    rec[3 * v] = composite ? groupOf[v]! * width + maxDepth - depth[v]! : 0;
    rec[3 * v + 1] = glob[v]!;
    rec[3 * v + 2] = cycleOf[v]!;
  }
}

/**
 * A stable counting sort of `items` by their record's key (0 ≤ key < `buckets`), writing the
 * sorted items' global index and cycle (read from the same record) into `at` and `cycle`.
 */
function sortByRecord(
  items: Int32Array,
  rec: Int32Array,
  buckets: number,
  at: Int32Array,
  cycle: Int32Array,
  arena: Arena,
): void {
  const count = arena.i32(buckets + 1);
  for (let i = 0; i < items.length; i++) count[rec[3 * items[i]!]! + 1]!++;
  for (let b = 0; b < buckets; b++) count[b + 1]! += count[b]!;
  for (let i = 0; i < items.length; i++) {
    const r = 3 * items[i]!;
    const p = count[rec[r]!]!++;
    at[p] = rec[r + 1]!;
    cycle[p] = rec[r + 2]!;
  }
}

/** Global index and cycle of each item of `order`, from its record. */
function fromRecords(order: Int32Array, rec: Int32Array, at: Int32Array, cycle: Int32Array): void {
  for (let i = 0; i < order.length; i++) {
    const r = 3 * order[i]!;
    at[i] = rec[r + 1]!;
    cycle[i] = rec[r + 2]!;
  }
}

/**
 * The groups' handles (group g is the next `sizes[g]` objects of the listing), and the reported
 * cycles: those with planned members, in plan order of their first member; members in plan
 * order.
 */
function materialize(
  at: Int32Array,
  cycle: Int32Array,
  sizes: Int32Array,
  nodes: ReadonlyArray<Node | undefined>,
  ids: readonly string[],
  ownership: readonly boolean[],
  cycles: PlanCycle[],
  arena: Arena,
): Node[][] {
  const index = arena.i32(ownership.length, -1);
  const groups: Node[][] = [];
  let i = 0;
  for (let group = 0; group < sizes.length; group++) {
    const size = sizes[group]!;
    const members = new Array<Node>(size);
    for (let k = 0; k < size; k++, i++) {
      const g = at[i]!;
      members[k] = nodes[g]!;
      const ci = cycle[i]!;
      if (ci < 0) continue;
      let c: PlanCycle;
      if (index[ci]! < 0) {
        index[ci] = cycles.length;
        c = { objects: [], groups: [], ownership: ownership[ci]! };
        cycles.push(c);
      } else c = cycles[index[ci]!]!;
      c.objects.push(ids[g]!);
      if (c.groups[c.groups.length - 1] !== group) c.groups.push(group);
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
  let p = 0;
  for (let k = 0; k < sorted.length; k++) {
    const l = local[sorted[k]!]!;
    if (l >= 0 && l < planned) order[p++] = l;
  }
}

/** Small plans: sort by group, ownership depth (deepest first), id. */
function sortSmall(
  planned: number,
  groupOf: Int32Array,
  depth: Int32Array,
  glob: Int32Array,
  ids: readonly string[],
  arena: Arena,
): Int32Array {
  const list: number[] = [];
  for (let v = 0; v < planned; v++) list.push(v);
  list.sort((a, b) => {
    const g = groupOf[a]! - groupOf[b]!;
    if (g !== 0) return g;
    const d = depth[b]! - depth[a]!;
    if (d !== 0) return d;
    const x = ids[glob[a]!]!;
    const y = ids[glob[b]!]!;
    return x < y ? -1 : x > y ? 1 : 0;
  });
  const order = arena.i32(planned);
  order.set(list);
  return order;
}

/** Marks a vertex put in a component: more than any DFS index; minus it, the component id. */
const DONE = 0x40000000;

/**
 * Layers a graph given as CSR (edge v → w: v before w, target `tgt[e] >> 1`) in O(V+E): levels
 * are longest paths over the condensation. Writes each vertex's level into `level` and returns
 * the number of levels (none is empty). A component of several vertices spans consecutive
 * sub-levels: at the top (`depthOf` null) it is a cycle, split by {@link splitCycle}; inside a
 * cycle (`depthOf`: ownership depth of each vertex) it is split by depth.
 *
 * First Kahn's algorithm layers every vertex no cycle reaches: its random accesses are
 * independent of each other (the CPU overlaps their cache misses), unlike a depth-first
 * search's. Only the rest — cycles and what they reach — goes through Tarjan's strongly
 * connected components (iterative), where each vertex has one 16-byte record
 * `[start, end, index, low]` (one cache line for everything a visit reads).
 */
function layer(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  ctx: Layering,
  level: Int32Array,
  depthOf: Int32Array | null,
): number {
  const arena = ctx.arena;
  const mark = arena.mark();
  const first = arena.i32(2 * n); // [indegree, earliest level] per vertex
  const queue = arena.raw(2 * n);
  let total = kahn(n, off, tgt, first, queue, level);
  const layered = kahnCount;
  if (layered < n) {
    // Every vertex left has a predecessor left: its component is reached by a cycle or is one.
    // Records; Kahn's vertices (in-degree down to 0) are marked done, outside any component.
    const vx = arena.raw(4 * n);
    for (let v = 0; v < n; v++) {
      vx[4 * v] = off[v]!;
      vx[4 * v + 1] = off[v + 1]!;
      vx[4 * v + 2] = first[2 * v]! > 0 ? -1 : DONE - 1;
    }
    // Members of each component, contiguous, components in completion order (sinks first).
    const members = arena.raw(n - layered);
    const start = arena.raw(n - layered + 1);
    const count = tarjan(n, vx, tgt, members, start, arena);
    const span = arena.i32(count, 1);
    const rel = arena.i32(n);
    for (let c = 0; c < count; c++) {
      const s = start[c]!;
      const e = start[c + 1]!;
      if (e - s > 1) {
        const group = members.subarray(s, e);
        span[c] =
          depthOf === null
            ? splitCycle(group, off, tgt, ctx, rel)
            : splitByDepth(group, depthOf, rel, arena);
      }
    }
    total = longestPath(count, start, members, vx, tgt, span, rel, first, level, total);
  }
  arena.release(mark);
  return total;
}

/** Vertices layered by the last {@link kahn} call. */
let kahnCount = 0;

/**
 * Kahn's algorithm from the sources: layers (longest path) every vertex whose predecessors all
 * get layered, in `queue` order; for the others, leaves their earliest level (from layered
 * predecessors) in `kf[2v + 1]` (`kf[2v]`: in-degree, side by side: one cache line per edge).
 * Returns the number of levels used; sets `kahnCount`.
 */
function kahn(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  kf: Int32Array,
  queue: Int32Array,
  level: Int32Array,
): number {
  const m = off[n]!;
  for (let k = 0; k < m; k++) kf[tgt[k]! & ~1]!++;
  // The queue holds [vertex, level] pairs: a vertex's level is final when it is queued.
  let tail = 0;
  for (let v = 0; v < n; v++) {
    if (kf[2 * v] !== 0) continue;
    queue[tail++] = v;
    queue[tail++] = 0;
  }
  let total = 0;
  for (let head = 0; head < tail; head += 2) {
    const v = queue[head]!;
    const l = queue[head + 1]!;
    level[v] = l;
    const next = l + 1;
    if (next > total) total = next;
    for (let k = off[v]!; k < off[v + 1]!; k++) {
      const w = tgt[k]! & ~1; // 2 * target
      if (kf[w + 1]! < next) kf[w + 1] = next;
      if (--kf[w]! === 0) {
        queue[tail++] = w >> 1;
        queue[tail++] = kf[w + 1]!;
      }
    }
  }
  kahnCount = tail >> 1;
  return total;
}

/**
 * Longest path over the components left by Kahn, in decreasing component id (a topological
 * order: Tarjan completes sinks first). A component starts at the latest earliest-level of its
 * members (pushed by Kahn into `first`, or by earlier components into their records); it pushes
 * its end to its successors' records. Writes its vertices' levels; returns the number of levels.
 */
function longestPath(
  count: number,
  start: Int32Array,
  members: Int32Array,
  vx: Int32Array,
  tgt: Int32Array,
  span: Int32Array,
  rel: Int32Array,
  first: Int32Array,
  level: Int32Array,
  total: number,
): number {
  for (let c = count - 1; c >= 0; c--) {
    const s = start[c]!;
    const e = start[c + 1]!;
    let at = 0;
    for (let i = s; i < e; i++) {
      const v = members[i]!;
      const f = Math.max(vx[4 * v + 3]!, first[2 * v + 1]!);
      if (f > at) at = f;
    }
    const next = at + span[c]!;
    if (next > total) total = next;
    for (let i = s; i < e; i++) {
      const v = members[i]!;
      level[v] = at + rel[v]!;
      // Edges inside the component raise records nobody reads again: no test needed.
      for (let k = vx[4 * v]!; k < vx[4 * v + 1]!; k++) {
        const w = 4 * (tgt[k]! >> 1) + 3;
        if (vx[w]! < next) vx[w] = next;
      }
    }
  }
  return total;
}

/** Relative levels of `members` by ownership depth, deepest first; returns how many. */
function splitByDepth(
  members: Int32Array,
  depthOf: Int32Array,
  rel: Int32Array,
  arena: Arena,
): number {
  let min = 0x7fffffff;
  let max = -1;
  for (let i = 0; i < members.length; i++) {
    const d = depthOf[members[i]!]!;
    if (d < min) min = d;
    if (d > max) max = d;
  }
  if (min === max) {
    for (let i = 0; i < members.length; i++) rel[members[i]!] = 0;
    return 1;
  }
  const mark = arena.mark();
  const rank = arena.i32(max - min + 1);
  for (let i = 0; i < members.length; i++) rank[max - depthOf[members[i]!]!] = 1;
  let r = 0;
  for (let d = 0; d <= max - min; d++) if (rank[d] !== 0) rank[d] = ++r;
  for (let i = 0; i < members.length; i++)
    rel[members[i]!] = rank[max - depthOf[members[i]!]!]! - 1;
  arena.release(mark);
  return r;
}

/**
 * A cycle of the combined relation: explicit dependencies win over ownership, so it is layered
 * by its dependency edges alone; what is still cyclic, and each of those levels, is split by
 * ownership depth (deepest first). Writes relative levels into `rel`, records the cycle in
 * `ctx`, returns the number of levels.
 */
function splitCycle(
  members: Int32Array,
  off: Int32Array,
  tgt: Int32Array,
  ctx: Layering,
  rel: Int32Array,
): number {
  const { arena, inCycle, depth } = ctx;
  const mark = arena.mark();
  const k = members.length;
  const subDepth = arena.raw(k);
  let maxDepth = 0;
  for (let i = 0; i < k; i++) {
    const v = members[i]!;
    inCycle[v] = i;
    const d = depth[v]!;
    subDepth[i] = d;
    if (d > maxDepth) maxDepth = d;
  }
  // The dependency edges inside the cycle, in one pass (room for every edge of the relation).
  const subOff = arena.raw(k + 1);
  const subTgt = arena.raw(tgt.length);
  let ownership = false;
  let p = 0;
  subOff[0] = 0;
  for (let i = 0; i < k; i++) {
    const v = members[i]!;
    for (let e = off[v]!; e < off[v + 1]!; e++) {
      const t = tgt[e]!;
      const l = inCycle[t >> 1]!;
      if (l < 0) continue;
      if ((t & 1) === DEPENDENCY) subTgt[p++] = l << 1;
      else ownership = true;
    }
    subOff[i + 1] = p;
  }
  const subLevel = arena.i32(k);
  const subTotal = layer(k, subOff, subTgt, ctx, subLevel, subDepth);
  // Relative levels: the distinct (dependency level, depth descending) pairs, in order.
  let order = arena.raw(k);
  for (let i = 0; i < k; i++) order[i] = i;
  order = countingSort(order, subDepth, maxDepth, -1, maxDepth + 1, arena);
  order = countingSort(order, subLevel, 0, 1, subTotal, arena);
  const subRel = arena.raw(k);
  let r = -1;
  let lastLevel = -1;
  let lastDepth = -1;
  for (let i = 0; i < k; i++) {
    const l = order[i]!;
    if (subLevel[l] !== lastLevel || subDepth[l] !== lastDepth) {
      r++;
      lastLevel = subLevel[l]!;
      lastDepth = subDepth[l]!;
    }
    subRel[l] = r;
  }
  const id = ctx.ownership.length;
  ctx.ownership.push(ownership);
  const cycleOf = ctx.cycleOf;
  for (let i = 0; i < k; i++) {
    const v = members[i]!;
    rel[v] = subRel[i]!;
    inCycle[v] = -1;
    cycleOf[v] = id;
  }
  arena.release(mark);
  return r + 1;
}

/**
 * Iterative Tarjan over the vertex records of {@link layer}. Writes the members of each component
 * contiguously into `members` (components in completion order: sinks first) with their bounds in
 * `start`, marks each member's record `DONE + component` with earliest level 0; returns the
 * number of components. A vertex in a component has an index above every DFS index, so no
 * on-stack flag is needed.
 */
function tarjan(
  n: number,
  vx: Int32Array,
  tgt: Int32Array,
  members: Int32Array,
  start: Int32Array,
  arena: Arena,
): number {
  const mark = arena.mark();
  const stack = arena.raw(n);
  const callV = arena.raw(n);
  const callE = arena.raw(n);
  let sp = 0;
  let cp = 0;
  let counter = 0;
  let count = 0;
  let np = 0;
  for (let s = 0; s < n; s++) {
    if (vx[4 * s + 2] !== -1) continue;
    vx[4 * s + 2] = vx[4 * s + 3] = counter++;
    stack[sp++] = s;
    callV[cp] = s;
    callE[cp++] = vx[4 * s]!;
    while (cp > 0) {
      const v = callV[cp - 1]!;
      const e = callE[cp - 1]!;
      if (e < vx[4 * v + 1]!) {
        callE[cp - 1] = e + 1;
        const w = tgt[e]! >> 1;
        const iw = vx[4 * w + 2]!;
        if (iw === -1) {
          vx[4 * w + 2] = vx[4 * w + 3] = counter++;
          stack[sp++] = w;
          callV[cp] = w;
          callE[cp++] = vx[4 * w]!;
        } else if (iw < vx[4 * v + 3]!) {
          vx[4 * v + 3] = iw;
        }
      } else {
        cp--;
        const lv = vx[4 * v + 3]!;
        if (lv === vx[4 * v + 2]) {
          start[count] = np;
          let w: number;
          do {
            w = stack[--sp]!;
            vx[4 * w + 2] = DONE + count;
            vx[4 * w + 3] = 0;
            members[np++] = w;
          } while (w !== v);
          count++;
        }
        if (cp > 0) {
          const u = callV[cp - 1]!;
          if (lv < vx[4 * u + 3]!) vx[4 * u + 3] = lv;
        }
      }
    }
  }
  start[count] = np;
  arena.release(mark);
  return count;
}

function computeEdges(csr: Csr): PlanEdge[] {
  const { ids, planned, off, tgt, groupOf } = csr;
  const edges: PlanEdge[] = [];
  for (let v = 0; v < planned; v++) {
    for (let e = off[v]!; e < off[v + 1]!; e++) {
      const kind = tgt[e]! & 1;
      let w = tgt[e]! >> 1;
      let transitive = false;
      if (w >= planned) {
        if (kind !== OWNER) continue;
        // Climb placeholder owners to the nearest planned one.
        while (w >= planned) {
          let up = -1;
          for (let f = off[w]!; f < off[w + 1]!; f++) {
            if ((tgt[f]! & 1) === OWNER) {
              up = tgt[f]! >> 1;
              break;
            }
          }
          if (up < 0) break;
          w = up;
        }
        if (w >= planned) continue;
        transitive = true;
      }
      edges.push({
        before: ids[v]!,
        after: ids[w]!,
        reason: kind === OWNER ? 'owner' : 'dependency',
        transitive,
        satisfied: groupOf[v]! < groupOf[w]!,
      });
    }
  }
  return edges;
}
