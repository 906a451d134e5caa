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

const OWNER = 0;
const DEPENDENCY = 1;

/**
 * Plans the destruction of `objects` (already resolved, live, deduplicated by the caller).
 * O(V+E) plus the sort of each group: objects outside the plan that relate two planned objects
 * (an owner between them, a chain of dependencies) take part as placeholders, so transitive
 * relations are honoured without computing any closure.
 */
export function planNodes(graph: ObjectGraph, objects: Node[], stamp: number): DestructionPlan {
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
  for (let i = 0; i < nodes.length; i++) {
    if (i + 1 >= offs.length) {
      const o = new Int32Array(offs.length * 2);
      o.set(offs);
      offs = o;
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
      push(owner.idx, OWNER);
    }
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
  const depth = new Int32Array(n);
  for (let i = 0; i < n; i++) depth[i] = ownershipDepth(nodes[i]!, stamp);
  const tie = (a: number, b: number): number => {
    const d = depth[b]! - depth[a]!;
    if (d !== 0) return d;
    const x = nodes[a]!.id;
    const y = nodes[b]!.id;
    return x < y ? -1 : x > y ? 1 : 0;
  };
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
  const local = new Int32Array(n).fill(-1);
  // A cycle of the combined relation: explicit dependencies win over ownership, so order it
  // by its dependency edges alone; what is still cyclic is split by ownership depth.
  const splitCycle = (members: number[]): number[][] => {
    for (let i = 0; i < members.length; i++) local[members[i]!] = i;
    const k = members.length;
    const subOff = new Int32Array(k + 1);
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
    const subTgt = new Int32Array(subOff[k]!);
    for (let i = 0; i < k; i++) {
      const v = members[i]!;
      let p = subOff[i]!;
      for (let e = off[v]!; e < off[v + 1]!; e++) {
        const l = local[tgt[e]!]!;
        if (l >= 0 && kind[e] === DEPENDENCY) subTgt[p++] = l;
      }
    }
    const levels = layer(
      k,
      subOff,
      subTgt,
      (sub) => splitByDepth(sub.map((l) => members[l]!)),
      members,
    );
    for (const v of members) local[v] = -1;
    cycleMembers.push({ members: members.slice(), ownership });
    return levels.flatMap(splitByDepth);
  };
  const layers = layer(n, off, tgt, splitCycle, undefined);
  // Compact the layers to groups of planned objects.
  const groupOfLocal = new Int32Array(n).fill(-1);
  let groupCount = 0;
  for (const level of layers) {
    let any = false;
    for (const v of level) {
      if (inPlan[v] === 1) {
        groupOfLocal[v] = groupCount;
        any = true;
      }
    }
    if (any) groupCount++;
  }
  // List each group by ownership depth (deepest first), then id. For a large plan, one pass over
  // the graph's cached id order replaces sorting strings; small plans sort.
  let listed: number[][] = Array.from({ length: groupCount }, () => []);
  if (planned * 16 >= graph.size) {
    for (const node of idOrder(graph)) {
      if (node.idxStamp === stamp && node.idx < planned)
        listed[groupOfLocal[node.idx]!]!.push(node.idx);
    }
    listed = listed.map((members) => splitByDepth(members).flat());
  } else {
    for (let v = 0; v < planned; v++) listed[groupOfLocal[v]!]!.push(v);
    for (const members of listed) members.sort(tie);
  }
  const groups = listed.map((members) => members.map((v) => nodes[v]!));
  const cycleOf = new Int32Array(n).fill(-1);
  const cycles: PlanCycle[] = [];
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
  listed.forEach((members, g) => {
    for (const v of members) {
      const ci = cycleOf[v]!;
      if (ci < 0) continue;
      const cycle = cycles[cycleIndex[ci]!]!;
      cycle.objects.push(nodes[v]!.id);
      if (cycle.groups[cycle.groups.length - 1] !== g) cycle.groups.push(g);
    }
  });
  return new DestructionPlan(graph, groups, cycles, {
    nodes,
    inPlan,
    off,
    tgt,
    kind,
    groupOf: groupOfLocal,
  });
}

/**
 * Layers a graph given as CSR (edge v → w: v before w) in O(V+E): Tarjan's strongly connected
 * components (iterative), then the longest path over the condensation. `inner` orders the members
 * of a non-trivial component into consecutive sub-levels, returning final indices; `map` turns the
 * local index of a trivial component into a final one (identity when absent).
 */
function layer(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  inner: (members: number[]) => number[][],
  map: readonly number[] | undefined,
): number[][] {
  const comp = new Int32Array(n).fill(-1);
  const count = tarjan(n, off, tgt, comp);
  const size = new Int32Array(count + 1);
  for (let v = 0; v < n; v++) size[comp[v]! + 1]!++;
  for (let c = 0; c < count; c++) size[c + 1]! += size[c]!;
  const start = size; // start[c] .. start[c+1] in `members`
  const members = new Int32Array(n);
  const fill = start.slice(0, count);
  for (let v = 0; v < n; v++) members[fill[comp[v]!]!++] = v;
  const span = new Int32Array(count).fill(1);
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
  const first = new Int32Array(count);
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
  const out: number[][] = [];
  for (let i = 0; i < total; i++) out.push([]);
  for (let c = 0; c < count; c++) {
    const levels = sub[c];
    if (levels === undefined) {
      const v = members[start[c]!]!;
      out[first[c]!]!.push(map ? map[v]! : v);
    } else {
      for (let k = 0; k < levels.length; k++) {
        const target = out[first[c]! + k]!;
        for (const v of levels[k]!) target.push(v);
      }
    }
  }
  return out;
}

/** Iterative Tarjan; writes component ids (sinks first) into `comp`, returns their count. */
function tarjan(n: number, off: Int32Array, tgt: Int32Array, comp: Int32Array): number {
  const index = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const stack = new Int32Array(n);
  const onStack = new Uint8Array(n);
  const callV = new Int32Array(n);
  const callE = new Int32Array(n);
  let sp = 0;
  let cp = 0;
  let counter = 0;
  let count = 0;
  for (let s = 0; s < n; s++) {
    if (index[s] !== -1) continue;
    index[s] = low[s] = counter++;
    stack[sp++] = s;
    onStack[s] = 1;
    callV[cp] = s;
    callE[cp++] = off[s]!;
    while (cp > 0) {
      const v = callV[cp - 1]!;
      const e = callE[cp - 1]!;
      if (e < off[v + 1]!) {
        callE[cp - 1] = e + 1;
        const w = tgt[e]!;
        if (index[w] === -1) {
          index[w] = low[w] = counter++;
          stack[sp++] = w;
          onStack[w] = 1;
          callV[cp] = w;
          callE[cp++] = off[w]!;
        } else if (onStack[w] === 1 && index[w]! < low[v]!) {
          low[v] = index[w]!;
        }
      } else {
        cp--;
        if (low[v] === index[v]) {
          let w: number;
          do {
            w = stack[--sp]!;
            onStack[w] = 0;
            comp[w] = count;
          } while (w !== v);
          count++;
        }
        if (cp > 0) {
          const u = callV[cp - 1]!;
          if (low[v]! < low[u]!) low[u] = low[v]!;
        }
      }
    }
  }
  return count;
}

/** Ownership depth (0 for an object without owner), memoized per stamp, without recursion. */
export function ownershipDepth(node: Node, stamp: number): number {
  if (node.depthStamp === stamp) return node.depth;
  const chain = depthChain;
  chain.length = 0;
  let cur: Node | null = node;
  while (cur && cur.depthStamp !== stamp) {
    chain.push(cur);
    cur = cur.owner && !cur.owner.removed ? cur.owner : null;
  }
  let d = cur ? cur.depth + 1 : 0;
  for (let i = chain.length - 1; i >= 0; i--) {
    chain[i]!.depth = d++;
    chain[i]!.depthStamp = stamp;
  }
  chain.length = 0;
  return node.depth;
}

/** Scratch stack of {@link ownershipDepth} (reused: no allocation per object). */
const depthChain: Node[] = [];

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
