import type { Arena } from './arena.js';
import { DEPENDENCY } from './plan.js';

/** @internal What layering needs besides the relation (a class: one shape for every helper). */
export class Layering {
  /** Per reported cycle: whether ownership edges take part in it. */
  readonly ownership: boolean[] = [];
  /** Vertices layered by the last {@link kahn} call. */
  layered = 0;
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

/** @internal Ownership depth of every vertex from its owner's index (-1: none), iteratively, in O(n). */
export function ownerDepths(n: number, ownerOf: Int32Array, arena: Arena): Int32Array {
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
 * @internal A stable counting sort of `items` by key `base + sign * keys[v]` (0 ≤ key < `buckets`).
 */
export function countingSort(
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

/** Marks a vertex put in a component: more than any DFS index; minus it, the component id. */
const DONE = 0x40000000;

/**
 * @internal Layers a graph given as CSR (edge v → w: v before w, target `tgt[e] >> 1`) in O(V+E): levels
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
export function layer(
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
  let total = kahn(n, off, tgt, first, queue, level, ctx);
  const layered = ctx.layered;
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

/**
 * Kahn's algorithm from the sources: layers (longest path) every vertex whose predecessors all
 * get layered, in `queue` order; for the others, leaves their earliest level (from layered
 * predecessors) in `kf[2v + 1]` (`kf[2v]`: in-degree, side by side: one cache line per edge).
 * Returns the number of levels used; sets `ctx.layered`.
 */
function kahn(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  kf: Int32Array,
  queue: Int32Array,
  level: Int32Array,
  ctx: Layering,
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
  ctx.layered = tail >> 1;
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
