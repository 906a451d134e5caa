// plan + collect on random graphs of 10^4, 10^5 and 10^6 objects (about 2 edges per object:
// ownership, references, destruction dependencies), plan on a tenant that owns everything (every
// object owned by one root, plus one destruction dependency each), and the spec's pairwise comparator
// (what Murano describes) on 10^3 and 10^4 objects, side by side. `pnpm bench`.
// Each size: the graph is built once; its first plan (which also sorts the ids once) is timed
// apart; then `runs` times, after a full GC: collect (complete scope), then plan of every object,
// through the public API. Best and median are printed, with the load average at start and end.
import { loadavg } from 'node:os';
import { ObjectGraph } from '../src/index.js';
import type { GraphObject } from '../src/index.js';

const gc = (globalThis as { gc?: () => void }).gc;

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Built {
  graph: ObjectGraph;
  objects: GraphObject[];
  owners: Int32Array; // -1 when none
  subs: Array<[number, number]>; // [publisher, subscriber]
  edges: number;
}

/**
 * n objects; each has an owner (p = 0.8, an earlier object, so ownership depth stays
 * logarithmic), a reference (p = 0.7, persistent or runtime) and a destruction dependency
 * (p = 0.5) to a random object: about 2 edges per object. 1% of the objects are roots.
 */
function build(n: number, seed: number): Built {
  const random = rng(seed);
  const pick = () => Math.floor(random() * n);
  const graph = new ObjectGraph();
  const objects: GraphObject[] = [];
  const owners = new Int32Array(n).fill(-1);
  let edges = 0;
  for (let i = 0; i < n; i++) {
    const owner = i > 0 && random() < 0.8 ? Math.floor(random() * i) : -1;
    owners[i] = owner;
    if (owner >= 0) edges++;
    objects.push(graph.add({ id: `o${i}`, type: 'T', owner: owner >= 0 ? objects[owner]! : null }));
  }
  const subs: Array<[number, number]> = [];
  for (let i = 0; i < n; i++) {
    if (random() < 0.7) {
      graph.set(objects[i]!, 'ref', objects[pick()]!, {
        kind: random() < 0.5 ? 'persistent' : 'runtime',
      });
      edges++;
    }
    if (random() < 0.5) {
      const p = pick();
      graph.subscribeDestruction(objects[p]!, objects[i]!);
      subs.push([p, i]);
      edges++;
    }
    if (random() < 0.01) graph.addRoot(objects[i]!);
  }
  return { graph, objects, owners, subs, edges };
}

function heapMB(): number {
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed / 1024 / 1024;
}

/** Wall time, and CPU time of this process (the machine may be shared: CPU time is steadier). */
function time<T>(fn: () => T): { ms: number; cpu: number; value: T } {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const value = fn();
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { ms, cpu: (c.user + c.system) / 1000, value };
}

/**
 * The spec's comparator, directly: A > B if A owns B (transitively), or A depends on B
 * (transitively) and not B on A. Closures are precomputed as bitsets (so each comparison is
 * O(1)), then groups are peeled: a group is every remaining object that is greater than no
 * other remaining object. O(n^2) per group.
 */
function comparatorPlan(b: Built): string[][] {
  const n = b.objects.length;
  const words = (n + 31) >>> 5;
  const owns = new Uint32Array(n * words); // owns[a] has bit x when a owns x
  for (let x = 0; x < n; x++) {
    for (let a = b.owners[x]!; a >= 0; a = b.owners[a]!)
      owns[a * words + (x >>> 5)]! |= 1 << (x & 31);
  }
  const depOut: number[][] = Array.from({ length: n }, () => []); // subscriber -> publishers
  for (const [p, s] of b.subs) depOut[s]!.push(p);
  const dep = new Uint32Array(n * words);
  const stack: number[] = [];
  for (let a = 0; a < n; a++) {
    stack.push(...depOut[a]!);
    while (stack.length > 0) {
      const x = stack.pop()!;
      const w = a * words + (x >>> 5);
      const bit = 1 << (x & 31);
      if (dep[w]! & bit) continue;
      dep[w]! |= bit;
      stack.push(...depOut[x]!);
    }
  }
  const has = (set: Uint32Array, a: number, x: number) =>
    (set[a * words + (x >>> 5)]! & (1 << (x & 31))) !== 0;
  const greater = (a: number, x: number) => has(owns, a, x) || (has(dep, a, x) && !has(dep, x, a));
  let remaining = Array.from({ length: n }, (_, i) => i);
  const groups: string[][] = [];
  while (remaining.length > 0) {
    const now: number[] = [];
    const later: number[] = [];
    for (const a of remaining) {
      let blocked = false;
      for (const x of remaining) {
        if (x !== a && greater(a, x)) {
          blocked = true;
          break;
        }
      }
      (blocked ? later : now).push(a);
    }
    if (now.length === 0) {
      groups.push(later.map((i) => b.objects[i]!.id)); // inconsistent comparator: give up ordering
      break;
    }
    groups.push(now.map((i) => b.objects[i]!.id));
    remaining = later;
  }
  return groups;
}

/**
 * The floor: one Kahn pass (in-degrees, then a queue) over the same ownership + dependency
 * relation as CSR in typed arrays — the least any O(V+E) planner does, without cycles, ties or
 * a listing. Its growth from one size to the next is what the memory hierarchy alone costs.
 */
function floorPass(b: Built): () => number {
  const n = b.objects.length;
  const off = new Int32Array(n + 1);
  for (let v = 0; v < n; v++) if (b.owners[v]! >= 0) off[v + 1]!++;
  for (const [, s] of b.subs) off[s + 1]!++;
  for (let v = 0; v < n; v++) off[v + 1]! += off[v]!;
  const tgt = new Int32Array(off[n]!);
  const fill = off.slice(0, n);
  for (let v = 0; v < n; v++) if (b.owners[v]! >= 0) tgt[fill[v]!++] = b.owners[v]!; // owned before owner
  for (const [p, s] of b.subs) tgt[fill[p]!++] = s; // publisher before subscriber
  const indeg = new Int32Array(n);
  const queue = new Int32Array(n);
  return () => {
    indeg.fill(0);
    for (let e = 0; e < tgt.length; e++) indeg[tgt[e]!]!++;
    let head = 0;
    let tail = 0;
    for (let v = 0; v < n; v++) if (indeg[v] === 0) queue[tail++] = v;
    while (head < tail) {
      const v = queue[head++]!;
      for (let e = off[v]!; e < off[v + 1]!; e++)
        if (--indeg[tgt[e]!]! === 0) queue[tail++] = tgt[e]!;
    }
    return tail;
  };
}

const fmt = (x: number, d = 1) => x.toFixed(d);
console.log(
  `node ${process.version}, ${gc ? 'gc exposed' : 'no --expose-gc (memory is approximate)'}, load average ${loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
const runs = 5;
console.log(
  `\n## plan + collect on random graphs (best of ${runs} runs, GC before each; wall ms, and CPU ms of this process)`,
);
console.log(
  '| objects | edges | collect ms (cpu) | plan ms (cpu) | plan+collect ms (cpu) | median plan+collect ms | first plan ms | graph heap MB | groups | cycles (largest) | growth wall (cpu) | floor ms (growth) |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
{
  const warm = build(2_000, 1); // JIT warm-up
  for (let r = 0; r < 5; r++) warm.graph.plan(warm.graph.collect());
}
let previous:
  | { ms: number; cpu: number; plan: number; planCpu: number; median: number; floor: number }
  | undefined;
const floorGrowth: string[] = [];
const growth: string[] = [];
const medianGrowth: string[] = [];
const planGrowth: string[] = [];
for (const n of [10_000, 100_000, 1_000_000]) {
  const h0 = heapMB();
  const b = build(n, 42);
  const graphMB = heapMB() - h0;
  gc?.();
  // The first plan of a graph also sorts its ids once (cached for later plans): shown apart.
  const first = time(() => b.graph.plan(b.objects));
  const totals: number[] = [];
  let best = { c: Infinity, cc: 0, p: Infinity, pc: 0, heap: 0, groups: 0, cycles: 0, largest: 0 };
  for (let r = 0; r < runs; r++) {
    gc?.();
    const c = time(() => b.graph.collect({ scope: 'complete' }));
    const p = time(() => b.graph.plan(b.objects));
    totals.push(c.ms + p.ms);
    if (c.ms + p.ms < best.c + best.p) {
      best = {
        c: c.ms,
        cc: c.cpu,
        p: p.ms,
        pc: p.cpu,
        heap: 0,
        groups: p.value.groups.length,
        cycles: p.value.cycles.length,
        largest: Math.max(0, ...p.value.cycles.map((x) => x.objects.length)),
      };
    }
  }
  best.heap = graphMB;
  const pass = floorPass(b);
  let floor = Infinity;
  for (let r = 0; r < 3 * runs; r++) floor = Math.min(floor, time(pass).ms);
  const total = { ms: best.c + best.p, cpu: best.cc + best.pc };
  const median = totals.sort((x, y) => x - y)[Math.floor(totals.length / 2)]!;
  let ratio = '';
  if (previous !== undefined) {
    ratio = `${fmt(total.ms / previous.ms, 2)}x (${fmt(total.cpu / previous.cpu, 2)}x)`;
    growth.push(ratio);
    medianGrowth.push(`${fmt(median / previous.median, 2)}x`);
    planGrowth.push(`${fmt(best.p / previous.plan, 2)}x (${fmt(best.pc / previous.planCpu, 2)}x)`);
    floorGrowth.push(`${fmt(floor / previous.floor, 2)}x`);
  }
  const floorCell = `${fmt(floor, 2)}${previous ? ` (${fmt(floor / previous.floor, 1)}x)` : ''}`;
  previous = { ...total, plan: best.p, planCpu: best.pc, median, floor };
  console.log(
    `| ${n.toLocaleString('en')} | ${b.edges.toLocaleString('en')} | ${fmt(best.c)} (${fmt(best.cc)}) | ${fmt(best.p)} (${fmt(best.pc)}) | ${fmt(total.ms)} (${fmt(total.cpu)}) | ${fmt(median)} | ${fmt(first.ms)} | ${fmt(best.heap)} | ${best.groups} | ${best.cycles} (${best.largest}) | ${ratio} | ${floorCell} |`,
  );
}
console.log(
  `growth for 10x objects, wall (cpu): ${growth.join(', ')} (linear growth would be 10x)`,
);
console.log(`growth for 10x objects, median wall: ${medianGrowth.join(', ')}`);
console.log(`plan alone, growth for 10x objects, wall (cpu): ${planGrowth.join(', ')}`);
console.log(
  `floor (one Kahn pass over the same relation in typed arrays), growth for 10x objects: ${floorGrowth.join(', ')}`,
);

console.log(
  `load average after: ${loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
/**
 * A tenant that owns everything: n - 1 objects owned by one root, each subscribed to the
 * destruction of one other random object (a random mapping: every object is downstream of a
 * dependency cycle, so none of the relation can be layered before its components are found).
 */
function buildTenant(n: number, seed: number): { graph: ObjectGraph; objects: GraphObject[] } {
  const random = rng(seed);
  const graph = new ObjectGraph();
  const tenant = graph.add({ id: 'tenant', type: 'Tenant', root: true });
  const objects: GraphObject[] = [tenant];
  for (let i = 1; i < n; i++) objects.push(graph.add({ id: `o${i}`, type: 'T', owner: tenant }));
  for (let i = 1; i < n; i++) {
    let publisher = 1 + Math.floor(random() * (n - 1));
    if (publisher === i) publisher = i === 1 ? 2 : 1;
    graph.subscribeDestruction(objects[publisher]!, objects[i]!);
  }
  return { graph, objects };
}

console.log(
  `\n## plan of a tenant that owns everything (best of ${runs} runs after the first, GC before each; wall ms, and CPU ms of this process)`,
);
console.log(
  '| objects | first plan ms | plan ms (cpu) | median plan ms | groups | cycles (largest) |',
);
console.log('|---|---|---|---|---|---|');
for (const n of [10_000, 100_000, 1_000_000]) {
  const { graph, objects } = buildTenant(n, 42);
  gc?.();
  const first = time(() => graph.plan(objects));
  const walls: number[] = [];
  let best = { ms: Infinity, cpu: 0, groups: 0, cycles: 0, largest: 0 };
  for (let r = 0; r < runs; r++) {
    gc?.();
    const p = time(() => graph.plan(objects));
    walls.push(p.ms);
    if (p.ms < best.ms) {
      best = {
        ms: p.ms,
        cpu: p.cpu,
        groups: p.value.groups.length,
        cycles: p.value.cycles.length,
        largest: Math.max(0, ...p.value.cycles.map((x) => x.objects.length)),
      };
    }
  }
  const median = walls.sort((x, y) => x - y)[Math.floor(walls.length / 2)]!;
  console.log(
    `| ${n.toLocaleString('en')} | ${fmt(first.ms)} | ${fmt(best.ms)} (${fmt(best.cpu)}) | ${fmt(median)} | ${best.groups} | ${best.cycles} (${best.largest}) |`,
  );
}

console.log('\n## versus the pairwise comparator (same graphs, plan only)');
console.log(
  '| objects | comparator ms | rigging plan ms | ratio (comparator / rigging) | same groups |',
);
console.log('|---|---|---|---|---|');
for (const n of [1_000, 10_000]) {
  const b = build(n, 7);
  b.graph.plan(b.objects); // warm up
  gc?.();
  let ours = time(() => b.graph.plan(b.objects));
  for (let r = 0; r < 2; r++) {
    const again = time(() => b.graph.plan(b.objects));
    if (again.ms < ours.ms) ours = again;
  }
  gc?.();
  const theirs = time(() => comparatorPlan(b));
  const same =
    ours.value.cycles.length === 0
      ? String(
          JSON.stringify(ours.value.groups.map((g) => g.map((o) => o.id).sort())) ===
            JSON.stringify(theirs.value.map((g) => g.slice().sort())),
        )
      : 'n/a (cycles)';
  console.log(
    `| ${n.toLocaleString('en')} | ${fmt(theirs.ms)} | ${fmt(ours.ms)} | ${fmt(theirs.ms / ours.ms, 1)}x | ${same} |`,
  );
}
