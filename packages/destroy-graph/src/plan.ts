import type { ObjectGraph } from './graph.js';
import { idOrder } from './graph.js';
import type { GraphObject, Node } from './node.js';

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

/** @internal the plan's combined relation: local index → nodes; edge e of v goes v → tgt[e] ("v before"). */
export interface Csr {
  nodes: Node[];
  inPlan: Uint8Array;
  off: Int32Array;
  tgt: Int32Array;
  kind: Uint8Array;
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

  mark(): number {
    return this.#chunk * 2 ** 32 + this.#used;
  }

  /** Frees everything allocated since `mark` (stack discipline). */
  release(mark: number): void {
    this.#chunk = Math.floor(mark / 2 ** 32);
    this.#used = mark % 2 ** 32;
  }
}

const arenas = new WeakMap<ObjectGraph, Arena>();

const OWNER = 0;
const DEPENDENCY = 1;

/**
 * Plans the destruction of `objects` (already resolved, live, deduplicated by the caller).
 * O(V+E) plus the sort of each group: objects outside the plan that relate two planned objects
 * (an owner between them, a chain of dependencies) take part as placeholders, so transitive
 * relations are honoured without computing any closure.
 */
export function planNodes(graph: ObjectGraph, objects: Node[], stamp: number): DestructionPlan {
  let arena = arenas.get(graph);
  if (!arena) arenas.set(graph, (arena = new Arena()));
  const nodes: Node[] = [];
  for (const n of objects) {
    if (n.idxStamp === stamp) continue;
    n.idxStamp = stamp;
    n.idx = nodes.length;
    nodes.push(n);
  }
  const planned = nodes.length;
  // Placeholders: everything reachable along "destroyed before" edges (owners, subscribers).
  // Objects are numbered when first seen and processed in that order, so their edges are
  // written straight into the CSR arrays in one pass over the subscriber maps.
  let cap = Math.max(16, nodes.length * 2);
  let tgt = new Int32Array(cap);
  let kind = new Uint8Array(cap);
  let offs = new Int32Array(Math.max(16, nodes.length + 1));
  let e = 0;
  const push = (w: number, k: number) => {
    if (e === cap) {
      cap *= 2;
      const t = new Int32Array(cap);
      t.set(tgt);
      tgt = t;
      const k2 = new Uint8Array(cap);
      k2.set(kind);
      kind = k2;
    }
    tgt[e] = w;
    kind[e++] = k;
  };
  let ownerOf = new Int32Array(offs.length);
  for (let i = 0; i < nodes.length; i++) {
    if (i + 1 >= offs.length) {
      const o = new Int32Array(offs.length * 2);
      o.set(offs);
      offs = o;
      const p = new Int32Array(offs.length);
      p.set(ownerOf);
      ownerOf = p;
    }
    offs[i] = e;
    const v = nodes[i]!;
    const owner = v.owner;
    if (owner && !owner.removed) {
      if (owner.idxStamp !== stamp) {
        owner.idxStamp = stamp;
        owner.idx = nodes.length;
        nodes.push(owner);
      }
      ownerOf[i] = owner.idx;
      push(owner.idx, OWNER);
    } else ownerOf[i] = -1;
    if (v.subscribers) {
      for (const w of v.subscribers.keys()) {
        if (w.removed || w === v) continue;
        if (w.idxStamp !== stamp) {
          w.idxStamp = stamp;
          w.idx = nodes.length;
          nodes.push(w);
        }
        push(w.idx, DEPENDENCY);
      }
    }
  }
  const n = nodes.length;
  offs[n] = e;
  const off = offs.subarray(0, n + 1);
  tgt = tgt.subarray(0, e);
  kind = kind.subarray(0, e);
  const inPlan = new Uint8Array(n);
  inPlan.fill(1, 0, planned);
  // Scratch: at most about 12 integers per vertex are alive at once (Tarjan's, within layer()).
  arena.reset(12 * n + 64);
  // Ownership depth over the owner indices (every owner of a node is a node): no object access.
  const depth = ownerDepths(n, ownerOf, arena);
  // Deepest first; the id order inside a level is settled when the groups are listed.
  const splitByDepth = (members: number[]): number[][] => {
    let min = Infinity;
    let max = -1;
    for (const v of members) {
      const d = depth[v]!;
      if (d < min) min = d;
      if (d > max) max = d;
    }
    if (min === max) return [members];
    const buckets: number[][] = [];
    for (let d = max; d >= min; d--) buckets.push([]);
    for (const v of members) buckets[max - depth[v]!]!.push(v);
    return buckets.filter((level) => level.length > 0);
  };
  const cycleMembers: Array<{ members: number[]; ownership: boolean }> = [];
  const local = arena.i32(n, -1);
  // A cycle of the combined relation: explicit dependencies win over ownership, so order it
  // by its dependency edges alone; what is still cyclic is split by ownership depth.
  const splitCycle = (members: number[]): number[][] => {
    for (let i = 0; i < members.length; i++) local[members[i]!] = i;
    const k = members.length;
    const subOff = arena.i32(k + 1);
    let ownership = false;
    for (let i = 0; i < k; i++) {
      const v = members[i]!;
      let d = 0;
      for (let e = off[v]!; e < off[v + 1]!; e++) {
        if (local[tgt[e]!]! < 0) continue;
        if (kind[e] === DEPENDENCY) d++;
        else ownership = true;
      }
      subOff[i + 1] = subOff[i]! + d;
    }
    const subTgt = arena.i32(subOff[k]!);
    for (let i = 0; i < k; i++) {
      const v = members[i]!;
      let p = subOff[i]!;
      for (let e = off[v]!; e < off[v + 1]!; e++) {
        const l = local[tgt[e]!]!;
        if (l >= 0 && kind[e] === DEPENDENCY) subTgt[p++] = l;
      }
    }
    const sub = layer(k, subOff, subTgt, arena, (inner) => {
      const levels = splitByDepth(inner.map((l) => members[l]!));
      return levels.map((level) => level.map((v) => local[v]!));
    });
    const buckets: number[][] = [];
    for (let i = 0; i < sub.total; i++) buckets.push([]);
    for (let l = 0; l < k; l++) buckets[sub.level[l]!]!.push(members[l]!);
    for (const v of members) local[v] = -1;
    cycleMembers.push({ members: members.slice(), ownership });
    const out: number[][] = [];
    for (const b of buckets) if (b.length > 0) for (const level of splitByDepth(b)) out.push(level);
    return out;
  };
  const { level, total } = layer(n, off, tgt, arena, splitCycle);
  // Compact the levels to groups of planned objects.
  const groupOfLevel = arena.i32(total, -1);
  for (let v = 0; v < planned; v++) groupOfLevel[level[v]!] = 0;
  let groupCount = 0;
  for (let l = 0; l < total; l++) if (groupOfLevel[l] === 0) groupOfLevel[l] = groupCount++ + 1;
  const groupOfLocal = new Int32Array(n).fill(-1);
  for (let v = 0; v < planned; v++) groupOfLocal[v] = groupOfLevel[level[v]!]! - 1;
  // List each group by ownership depth (deepest first), then id: for a large plan, one pass over
  // the graph's cached id order and two stable counting sorts (depth, then group) replace
  // sorting strings; small plans sort.
  let order: Int32Array = arena.i32(planned);
  if (planned * 16 >= graph.size) {
    let p = 0;
    for (const node of idOrder(graph)) {
      if (node.idxStamp === stamp && node.idx < planned) order[p++] = node.idx;
    }
    let maxDepth = 0;
    for (let v = 0; v < planned; v++) if (depth[v]! > maxDepth) maxDepth = depth[v]!;
    order = countingSort(order, maxDepth + 1, (v) => maxDepth - depth[v]!, arena);
    order = countingSort(order, groupCount, (v) => groupOfLocal[v]!, arena);
  } else {
    const tie = (a: number, b: number): number => {
      const g = groupOfLocal[a]! - groupOfLocal[b]!;
      if (g !== 0) return g;
      const d = depth[b]! - depth[a]!;
      if (d !== 0) return d;
      const x = nodes[a]!.id;
      const y = nodes[b]!.id;
      return x < y ? -1 : x > y ? 1 : 0;
    };
    const list: number[] = [];
    for (let v = 0; v < planned; v++) list.push(v);
    list.sort(tie);
    order.set(list);
  }
  // Each group is a slice of `order` (sorted by group first).
  const groups: Node[][] = [];
  for (let i = 0; i < planned;) {
    const g = groupOfLocal[order[i]!]!;
    let j = i;
    while (j < planned && groupOfLocal[order[j]!] === g) j++;
    const members = new Array<Node>(j - i);
    for (let k = i; k < j; k++) members[k - i] = nodes[order[k]!]!;
    groups.push(members);
    i = j;
  }
  const cycles: PlanCycle[] = [];
  if (cycleMembers.length > 0) {
    const cycleOf = arena.i32(n, -1);
    const cycleIndex: number[] = [];
    cycleMembers.forEach(({ members, ownership }, ci) => {
      let mine = 0;
      for (const v of members) {
        cycleOf[v] = ci;
        if (inPlan[v] === 1) mine++;
      }
      cycleIndex.push(mine === 0 ? -1 : cycles.length);
      if (mine > 0) cycles.push({ objects: [], groups: [], ownership });
    });
    for (let i = 0; i < planned; i++) {
      const v = order[i]!;
      const ci = cycleOf[v]!;
      if (ci < 0) continue;
      const g = groupOfLocal[v]!;
      const cycle = cycles[cycleIndex[ci]!]!;
      cycle.objects.push(nodes[v]!.id);
      if (cycle.groups[cycle.groups.length - 1] !== g) cycle.groups.push(g);
    }
  }
  return new DestructionPlan(graph, groups, cycles, {
    nodes,
    inPlan,
    off,
    tgt,
    kind,
    groupOf: groupOfLocal,
  });
}

/** Ownership depth of every vertex from its owner's index (-1: none), iteratively, in O(n). */
function ownerDepths(n: number, ownerOf: Int32Array, arena: Arena): Int32Array {
  const depth = arena.i32(n, -1);
  const mark = arena.mark();
  const chain = arena.i32(n);
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

/** A stable counting sort of `items` by `key` (0 ≤ key < `buckets`). */
function countingSort(
  items: Int32Array,
  buckets: number,
  key: (v: number) => number,
  arena: Arena,
): Int32Array {
  const count = arena.i32(buckets + 1);
  for (let i = 0; i < items.length; i++) count[key(items[i]!) + 1]!++;
  for (let b = 0; b < buckets; b++) count[b + 1]! += count[b]!;
  const out = arena.i32(items.length);
  for (let i = 0; i < items.length; i++) {
    const v = items[i]!;
    out[count[key(v)]!++] = v;
  }
  return out;
}

/**
 * Layers a graph given as CSR (edge v → w: v before w) in O(V+E): Tarjan's strongly connected
 * components (iterative), then the longest path over the condensation. `inner` orders the members
 * of a non-trivial component into consecutive sub-levels. Returns the level of each vertex and
 * the number of levels (none is empty).
 */
function layer(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  arena: Arena,
  inner: (members: number[]) => number[][],
): { level: Int32Array; total: number } {
  const level = arena.i32(n);
  const mark = arena.mark();
  const comp = arena.i32(n, -1);
  const count = tarjan(n, off, tgt, comp, arena);
  const size = arena.i32(count + 1);
  for (let v = 0; v < n; v++) size[comp[v]! + 1]!++;
  for (let c = 0; c < count; c++) size[c + 1]! += size[c]!;
  const start = size; // start[c] .. start[c+1] in `members`
  const members = arena.i32(n);
  const fill = arena.i32(count);
  fill.set(start.subarray(0, count));
  for (let v = 0; v < n; v++) members[fill[comp[v]!]!++] = v;
  const span = arena.i32(count, 1);
  const sub: Array<number[][] | undefined> = new Array<number[][] | undefined>(count);
  for (let c = 0; c < count; c++) {
    const s = start[c]!;
    const e = start[c + 1]!;
    if (e - s > 1) {
      const levels = inner(Array.from(members.subarray(s, e)));
      sub[c] = levels;
      span[c] = Math.max(1, levels.length);
    }
  }
  // Tarjan completes sinks first: decreasing component id is a topological order.
  const first = arena.i32(count);
  let total = 0;
  for (let c = count - 1; c >= 0; c--) {
    const next = first[c]! + span[c]!;
    if (next > total) total = next;
    for (let i = start[c]!; i < start[c + 1]!; i++) {
      const v = members[i]!;
      for (let e = off[v]!; e < off[v + 1]!; e++) {
        const d = comp[tgt[e]!]!;
        if (d !== c && first[d]! < next) first[d] = next;
      }
    }
  }
  for (let c = 0; c < count; c++) {
    const levels = sub[c];
    if (levels === undefined) level[members[start[c]!]!] = first[c]!;
    else {
      for (let k = 0; k < levels.length; k++) for (const v of levels[k]!) level[v] = first[c]! + k;
    }
  }
  arena.release(mark);
  return { level, total };
}

/**
 * Iterative Tarjan; writes component ids (sinks first) into `comp`, returns their count. Index and
 * low link of a vertex sit side by side (one cache line per visit on large graphs), and a vertex
 * put in a component gets index "infinity", so no on-stack flag is needed.
 */
function tarjan(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  comp: Int32Array,
  arena: Arena,
): number {
  const DONE = 0x7fffffff;
  const mark = arena.mark();
  const il = arena.i32(2 * n, -1); // il[2v]: index (-1: unvisited, DONE: in a component); il[2v+1]: low
  const stack = arena.i32(n);
  const callV = arena.i32(n);
  const callE = arena.i32(n);
  let sp = 0;
  let cp = 0;
  let counter = 0;
  let count = 0;
  for (let s = 0; s < n; s++) {
    if (il[2 * s] !== -1) continue;
    il[2 * s] = il[2 * s + 1] = counter++;
    stack[sp++] = s;
    callV[cp] = s;
    callE[cp++] = off[s]!;
    while (cp > 0) {
      const v = callV[cp - 1]!;
      const e = callE[cp - 1]!;
      if (e < off[v + 1]!) {
        callE[cp - 1] = e + 1;
        const w = tgt[e]!;
        const iw = il[2 * w]!;
        if (iw === -1) {
          il[2 * w] = il[2 * w + 1] = counter++;
          stack[sp++] = w;
          callV[cp] = w;
          callE[cp++] = off[w]!;
        } else if (iw < il[2 * v + 1]!) {
          il[2 * v + 1] = iw;
        }
      } else {
        cp--;
        const lv = il[2 * v + 1]!;
        if (lv === il[2 * v]) {
          let w: number;
          do {
            w = stack[--sp]!;
            il[2 * w] = DONE;
            comp[w] = count;
          } while (w !== v);
          count++;
        }
        if (cp > 0) {
          const u = callV[cp - 1]!;
          if (lv < il[2 * u + 1]!) il[2 * u + 1] = lv;
        }
      }
    }
  }
  arena.release(mark);
  return count;
}

function computeEdges(csr: Csr): PlanEdge[] {
  const { nodes, inPlan, off, tgt, kind, groupOf } = csr;
  const edges: PlanEdge[] = [];
  for (let v = 0; v < nodes.length; v++) {
    if (inPlan[v] !== 1) continue;
    const before = nodes[v]!;
    for (let e = off[v]!; e < off[v + 1]!; e++) {
      let w = tgt[e]!;
      let transitive = false;
      if (inPlan[w] !== 1) {
        if (kind[e] !== OWNER) continue;
        // Climb placeholder owners to the nearest planned one.
        while (inPlan[w] !== 1) {
          let up = -1;
          for (let f = off[w]!; f < off[w + 1]!; f++) {
            if (kind[f] === OWNER) {
              up = tgt[f]!;
              break;
            }
          }
          if (up < 0) break;
          w = up;
        }
        if (inPlan[w] !== 1) continue;
        transitive = true;
      }
      const after = nodes[w]!;
      edges.push({
        before: before.id,
        after: after.id,
        reason: kind[e] === OWNER ? 'owner' : 'dependency',
        transitive,
        satisfied: groupOf[v]! < groupOf[w]!,
      });
    }
  }
  return edges;
}
