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
    // Vertices that reach no cycle (most of a graph hanging below a few cycles) are peeled off
    // from the sinks and layered after the components, in one forward pass: only what both is
    // reached by a cycle and reaches one goes through Tarjan.
    const peeled = arena.raw(n - layered);
    const peeledCount = peelSinks(n, off, tgt, vx, peeled, arena);
    const left = n - layered - peeledCount;
    // Members of each component, contiguous, components in completion order (sinks first).
    const members = arena.raw(left);
    const start = arena.raw(left + 1);
    const count = tarjan(n, vx, tgt, members, start, arena);
    const span = arena.i32(count, 1);
    const rel = arena.i32(n);
    for (let component = 0; component < count; component++) {
      const from = start[component]!;
      const to = start[component + 1]!;
      if (to - from > 1) {
        const group = members.subarray(from, to);
        span[component] =
          depthOf === null
            ? splitCycle(group, off, tgt, ctx, rel)
            : splitByDepth(group, depthOf, rel, arena);
      }
    }
    total = longestPath(count, start, members, vx, tgt, span, rel, first, level, total);
    total = layerPeeled(peeled, peeledCount, vx, tgt, first, level, total);
  }
  arena.release(mark);
  return total;
}

/**
 * Peels, among the vertices Kahn left (record index -1), those that reach no cycle: sinks first,
 * then every vertex whose successors are all peeled (over the reverse of that part of the
 * relation). Writes them in peeling order into `peeled`, marks their records done (`DONE - 2`,
 * earliest level 0); returns how many.
 */
function peelSinks(
  n: number,
  off: Int32Array,
  tgt: Int32Array,
  vx: Int32Array,
  peeled: Int32Array,
  arena: Arena,
): number {
  const mark = arena.mark();
  // Every successor of a vertex Kahn left is left too: out-degrees are the full ones.
  const reverseOffsets = arena.i32(n + 1);
  const outLeft = arena.raw(n);
  for (let vertex = 0; vertex < n; vertex++) {
    if (vx[4 * vertex + 2] !== -1) continue;
    const end = off[vertex + 1]!;
    outLeft[vertex] = end - off[vertex]!;
    for (let edge = off[vertex]!; edge < end; edge++) reverseOffsets[(tgt[edge]! >> 1) + 1]!++;
  }
  for (let vertex = 0; vertex < n; vertex++) {
    reverseOffsets[vertex + 1]! += reverseOffsets[vertex]!;
  }
  const predecessors = arena.raw(reverseOffsets[n]!);
  const fill = arena.raw(n);
  fill.set(reverseOffsets.subarray(0, n));
  let tail = 0;
  for (let vertex = 0; vertex < n; vertex++) {
    if (vx[4 * vertex + 2] !== -1) continue;
    const end = off[vertex + 1]!;
    if (outLeft[vertex] === 0) peeled[tail++] = vertex;
    for (let edge = off[vertex]!; edge < end; edge++) {
      predecessors[fill[tgt[edge]! >> 1]!++] = vertex;
    }
  }
  for (let head = 0; head < tail; head++) {
    const vertex = peeled[head]!;
    vx[4 * vertex + 2] = DONE - 2;
    vx[4 * vertex + 3] = 0;
    const end = reverseOffsets[vertex + 1]!;
    for (let at = reverseOffsets[vertex]!; at < end; at++) {
      const predecessor = predecessors[at]!;
      if (--outLeft[predecessor]! === 0) peeled[tail++] = predecessor;
    }
  }
  arena.release(mark);
  return tail;
}

/**
 * Layers the peeled vertices in reverse peeling order (a topological order of them: each was
 * peeled after all its successors), after the components: each starts at the latest of the
 * earliest levels pushed into its record (by components and peeled predecessors) and by Kahn's
 * vertices; returns the number of levels.
 */
function layerPeeled(
  peeled: Int32Array,
  count: number,
  vx: Int32Array,
  tgt: Int32Array,
  first: Int32Array,
  level: Int32Array,
  total: number,
): number {
  for (let at = count - 1; at >= 0; at--) {
    const vertex = peeled[at]!;
    const start = Math.max(vx[4 * vertex + 3]!, first[2 * vertex + 1]!);
    level[vertex] = start;
    const next = start + 1;
    if (next > total) total = next;
    const end = vx[4 * vertex + 1]!;
    for (let edge = vx[4 * vertex]!; edge < end; edge++) {
      const record = 4 * (tgt[edge]! >> 1) + 3;
      if (vx[record]! < next) vx[record] = next;
    }
  }
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
  inAndEarliest: Int32Array,
  queue: Int32Array,
  level: Int32Array,
  ctx: Layering,
): number {
  const edgeCount = off[n]!;
  for (let edge = 0; edge < edgeCount; edge++) inAndEarliest[tgt[edge]! & ~1]!++;
  // The queue holds [vertex, level] pairs: a vertex's level is final when it is queued.
  let tail = 0;
  for (let vertex = 0; vertex < n; vertex++) {
    if (inAndEarliest[2 * vertex] !== 0) continue;
    queue[tail++] = vertex;
    queue[tail++] = 0;
  }
  let total = 0;
  for (let head = 0; head < tail; head += 2) {
    const vertex = queue[head]!;
    const vertexLevel = queue[head + 1]!;
    level[vertex] = vertexLevel;
    const next = vertexLevel + 1;
    if (next > total) total = next;
    for (let edge = off[vertex]!; edge < off[vertex + 1]!; edge++) {
      const twiceTarget = tgt[edge]! & ~1; // 2 * target
      if (inAndEarliest[twiceTarget + 1]! < next) inAndEarliest[twiceTarget + 1] = next;
      if (--inAndEarliest[twiceTarget]! === 0) {
        queue[tail++] = twiceTarget >> 1;
        queue[tail++] = inAndEarliest[twiceTarget + 1]!;
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
  for (let component = count - 1; component >= 0; component--) {
    const from = start[component]!;
    const to = start[component + 1]!;
    let begin = 0;
    for (let at = from; at < to; at++) {
      const vertex = members[at]!;
      const earliest = Math.max(vx[4 * vertex + 3]!, first[2 * vertex + 1]!);
      if (earliest > begin) begin = earliest;
    }
    const next = begin + span[component]!;
    if (next > total) total = next;
    for (let at = from; at < to; at++) {
      const vertex = members[at]!;
      level[vertex] = begin + rel[vertex]!;
      // Edges inside the component raise records nobody reads again: no test needed.
      for (let edge = vx[4 * vertex]!; edge < vx[4 * vertex + 1]!; edge++) {
        const record = 4 * (tgt[edge]! >> 1) + 3;
        if (vx[record]! < next) vx[record] = next;
      }
    }
  }
  return total;
}

/**
 * Relative levels of `members` (a component of two or more) by ownership depth, deepest first:
 * each distinct depth is one level; returns how many.
 */
function splitByDepth(
  members: Int32Array,
  depthOf: Int32Array,
  rel: Int32Array,
  arena: Arena,
): number {
  let min = depthOf[members[0]!]!;
  let max = min;
  for (const member of members) {
    min = Math.min(min, depthOf[member]!);
    max = Math.max(max, depthOf[member]!);
  }
  const mark = arena.mark();
  // Indexed by `max - depth`: 1 where some member has that depth, then its level + 1.
  const rank = arena.i32(max - min + 1);
  for (const member of members) rank[max - depthOf[member]!] = 1;
  let ranks = 0;
  for (let at = 0; at <= max - min; at++) if (rank[at] !== 0) rank[at] = ++ranks;
  for (const member of members) rel[member] = rank[max - depthOf[member]!]! - 1;
  arena.release(mark);
  return ranks;
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
  const size = members.length;
  const subDepth = arena.raw(size);
  let maxDepth = 0;
  for (let position = 0; position < size; position++) {
    const vertex = members[position]!;
    inCycle[vertex] = position;
    const vertexDepth = depth[vertex]!;
    subDepth[position] = vertexDepth;
    if (vertexDepth > maxDepth) maxDepth = vertexDepth;
  }
  // The dependency edges inside the cycle, in one pass (room for every edge of the relation).
  const subOff = arena.raw(size + 1);
  const subTgt = arena.raw(tgt.length);
  let ownership = false;
  let written = 0;
  subOff[0] = 0;
  for (let position = 0; position < size; position++) {
    const vertex = members[position]!;
    for (let edge = off[vertex]!; edge < off[vertex + 1]!; edge++) {
      const target = tgt[edge]!;
      const local = inCycle[target >> 1]!;
      if (local < 0) continue;
      if ((target & 1) === DEPENDENCY) subTgt[written++] = local << 1;
      else ownership = true;
    }
    subOff[position + 1] = written;
  }
  const subLevel = arena.i32(size);
  const subTotal = layer(size, subOff, subTgt, ctx, subLevel, subDepth);
  // Relative levels: the distinct (dependency level, depth descending) pairs, in order.
  let order = arena.raw(size);
  for (let position = 0; position < size; position++) order[position] = position;
  order = countingSort(order, subDepth, maxDepth, -1, maxDepth + 1, arena);
  order = countingSort(order, subLevel, 0, 1, subTotal, arena);
  const subRel = arena.raw(size);
  let relative = -1;
  let lastLevel = -1;
  let lastDepth = -1;
  for (let position = 0; position < size; position++) {
    const local = order[position]!;
    if (subLevel[local] !== lastLevel || subDepth[local] !== lastDepth) {
      relative++;
      lastLevel = subLevel[local]!;
      lastDepth = subDepth[local]!;
    }
    subRel[local] = relative;
  }
  const cycleId = ctx.ownership.length;
  ctx.ownership.push(ownership);
  const cycleOf = ctx.cycleOf;
  for (let position = 0; position < size; position++) {
    const vertex = members[position]!;
    rel[vertex] = subRel[position]!;
    inCycle[vertex] = -1;
    cycleOf[vertex] = cycleId;
  }
  arena.release(mark);
  return relative + 1;
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
  const callVertex = arena.raw(n);
  const callEdge = arena.raw(n);
  let stackTop = 0;
  let callTop = 0;
  let nextIndex = 0;
  let count = 0;
  let written = 0;
  for (let root = 0; root < n; root++) {
    if (vx[4 * root + 2] !== -1) continue;
    vx[4 * root + 2] = vx[4 * root + 3] = nextIndex++;
    stack[stackTop++] = root;
    callVertex[callTop] = root;
    callEdge[callTop++] = vx[4 * root]!;
    while (callTop > 0) {
      const vertex = callVertex[callTop - 1]!;
      const edge = callEdge[callTop - 1]!;
      if (edge < vx[4 * vertex + 1]!) {
        callEdge[callTop - 1] = edge + 1;
        const target = tgt[edge]! >> 1;
        const targetIndex = vx[4 * target + 2]!;
        if (targetIndex === -1) {
          vx[4 * target + 2] = vx[4 * target + 3] = nextIndex++;
          stack[stackTop++] = target;
          callVertex[callTop] = target;
          callEdge[callTop++] = vx[4 * target]!;
        } else if (targetIndex < vx[4 * vertex + 3]!) {
          vx[4 * vertex + 3] = targetIndex;
        }
      } else {
        callTop--;
        const low = vx[4 * vertex + 3]!;
        if (low === vx[4 * vertex + 2]) {
          start[count] = written;
          let target: number;
          do {
            target = stack[--stackTop]!;
            vx[4 * target + 2] = DONE + count;
            vx[4 * target + 3] = 0;
            members[written++] = target;
          } while (target !== vertex);
          count++;
        }
        if (callTop > 0) {
          const caller = callVertex[callTop - 1]!;
          if (low < vx[4 * caller + 3]!) vx[4 * caller + 3] = low;
        }
      }
    }
  }
  start[count] = written;
  arena.release(mark);
  return count;
}
