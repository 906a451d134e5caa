// The layering a plan promises, checked against a naive model of its definition: levels are
// longest paths over the strongly connected components of the combined relation ("destroyed
// before": an object before its owner, a publisher before its subscriber); a cycle is layered by
// its dependency edges alone, what is still cyclic there by ownership depth (deepest first), and
// each of those levels split by ownership depth; the groups are the levels that hold planned
// objects, each listed by depth (deepest first), then id.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ObjectGraph } from '../src/index.js';
import type { GraphObject } from '../src/index.js';

type Kind = 'owner' | 'dependency';
type Edge = [before: number, after: number, kind: Kind];

interface Model {
  n: number;
  owners: Array<number | null>;
  subs: Array<[publisher: number, subscriber: number]>;
  chosen: boolean[];
}

const model = (maxN: number): fc.Arbitrary<Model> =>
  fc.integer({ min: 1, max: maxN }).chain((n) => {
    const idx = fc.integer({ min: 0, max: n - 1 });
    return fc.record({
      n: fc.constant(n),
      owners: fc.tuple(
        ...Array.from({ length: n }, (_, i) =>
          i === 0 ? fc.constant(null) : fc.option(fc.integer({ min: 0, max: i - 1 }), { freq: 2 }),
        ),
      ),
      subs: fc.array(fc.tuple(idx, idx), { maxLength: 2 * n }),
      chosen: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
    });
  });

const id = (i: number) => `o${String(i).padStart(2, '0')}`;

/** Every vertex `from` reaches (itself included) over `edges`. */
function reachFrom(from: number, edges: readonly Edge[]): Set<number> {
  const next = new Map<number, number[]>();
  for (const [a, b] of edges) next.set(a, [...(next.get(a) ?? []), b]);
  const seen = new Set([from]);
  const queue = [from];
  for (let head = 0; head < queue.length; head++) {
    for (const b of next.get(queue[head]!) ?? []) {
      if (!seen.has(b)) {
        seen.add(b);
        queue.push(b);
      }
    }
  }
  return seen;
}

interface ModelCycle {
  members: number[];
  ownership: boolean;
}

/**
 * The definition of the layering, naively: components by mutual reachability, each one's span
 * and relative levels, then longest paths over the condensation by relaxation.
 */
function layerModel(
  vertices: readonly number[],
  allEdges: readonly Edge[],
  depth: readonly number[],
  top: boolean,
  cycles: ModelCycle[],
): Map<number, number> {
  const inSet = new Set(vertices);
  const edges = allEdges.filter(([a, b]) => a !== b && inSet.has(a) && inSet.has(b));
  const reach = new Map(vertices.map((v) => [v, reachFrom(v, edges)]));
  const componentOf = new Map<number, number>();
  const components: number[][] = [];
  for (const v of vertices) {
    if (componentOf.has(v)) continue;
    const members = vertices.filter((u) => reach.get(v)!.has(u) && reach.get(u)!.has(v));
    for (const u of members) componentOf.set(u, components.length);
    components.push(members);
  }
  const rel = new Map<number, number>();
  const span = components.map((members) => {
    if (members.length === 1) {
      rel.set(members[0]!, 0);
      return 1;
    }
    const inside = new Set(members);
    if (top) {
      const within = edges.filter(([a, b]) => inside.has(a) && inside.has(b));
      cycles.push({ members, ownership: within.some(([, , kind]) => kind === 'owner') });
      const sub = layerModel(
        members,
        within.filter(([, , kind]) => kind === 'dependency'),
        depth,
        false,
        cycles,
      );
      const key = (v: number) => `${String(sub.get(v)).padStart(4, '0')}:${9999 - depth[v]!}`;
      const keys = [...new Set(members.map(key))].sort();
      for (const v of members) rel.set(v, keys.indexOf(key(v)));
      return keys.length;
    }
    const depths = [...new Set(members.map((v) => depth[v]!))].sort((a, b) => b - a);
    for (const v of members) rel.set(v, depths.indexOf(depth[v]!));
    return depths.length;
  });
  const begin = components.map(() => 0);
  for (let round = 0; round <= components.length; round++) {
    for (const [a, b] of edges) {
      const ca = componentOf.get(a)!;
      const cb = componentOf.get(b)!;
      if (ca !== cb) begin[cb] = Math.max(begin[cb]!, begin[ca]! + span[ca]!);
    }
  }
  return new Map(vertices.map((v) => [v, begin[componentOf.get(v)!]! + rel.get(v)!]));
}

interface Expected {
  groups: string[][];
  cycles: Array<{ objects: string[]; groups: number[]; ownership: boolean }>;
}

/** The plan of the chosen objects, from {@link layerModel}. */
function expectedPlan(m: Model, chosen: readonly number[]): Expected {
  const all: Edge[] = [];
  m.owners.forEach((owner, i) => {
    if (owner != null) all.push([i, owner, 'owner']);
  });
  for (const [publisher, subscriber] of m.subs) all.push([publisher, subscriber, 'dependency']);
  const depth = m.owners.map((_, i) => {
    let d = 0;
    for (let o = m.owners[i]; o != null; o = m.owners[o]) d++;
    return d;
  });
  // The vertices: the chosen objects and everything they are destroyed before.
  const vertices = new Set<number>();
  for (const c of chosen) for (const v of reachFrom(c, all)) vertices.add(v);
  const sorted = [...vertices].sort((a, b) => a - b);
  const cycles: ModelCycle[] = [];
  const level = layerModel(sorted, all, depth, true, cycles);
  const levels = [...new Set(chosen.map((c) => level.get(c)!))].sort((a, b) => a - b);
  const groupOf = (v: number) => levels.indexOf(level.get(v)!);
  const groups = levels.map((_, g) =>
    chosen.filter((c) => groupOf(c) === g).sort((a, b) => depth[b]! - depth[a]! || a - b),
  );
  const position = new Map(groups.flat().map((v, k) => [v, k]));
  const reported = cycles
    .map((c) => ({
      members: c.members
        .filter((v) => position.has(v))
        .sort((a, b) => position.get(a)! - position.get(b)!),
      ownership: c.ownership,
    }))
    .filter((c) => c.members.length > 0)
    .sort((a, b) => position.get(a.members[0]!)! - position.get(b.members[0]!)!);
  return {
    groups: groups.map((g) => g.map(id)),
    cycles: reported.map((c) => ({
      objects: c.members.map(id),
      groups: [...new Set(c.members.map(groupOf))],
      ownership: c.ownership,
    })),
  };
}

function build(m: Model): { g: ObjectGraph; objs: GraphObject[] } {
  const g = new ObjectGraph();
  const objs: GraphObject[] = [];
  for (let i = 0; i < m.n; i++) {
    const owner = m.owners[i];
    objs.push(g.add({ id: id(i), type: 'T', owner: owner == null ? null : objs[owner]! }));
  }
  for (const [p, s] of m.subs) g.subscribeDestruction(objs[p]!, objs[s]!);
  return { g, objs };
}

function actualPlan(g: ObjectGraph, planned: readonly GraphObject[]): Expected {
  const plan = g.plan(planned);
  return {
    groups: plan.groups.map((group) => group.map((o) => o.id)),
    cycles: plan.cycles.map((c) => ({ ...c })),
  };
}

describe('layering', () => {
  it('matches the definition on random graphs, for any subset planned', () => {
    fc.assert(
      fc.property(model(16), (m) => {
        const { g, objs } = build(m);
        const chosen = objs.flatMap((_, i) => (m.chosen[i] ? [i] : []));
        expect(
          actualPlan(
            g,
            chosen.map((i) => objs[i]!),
          ),
        ).toEqual(expectedPlan(m, chosen));
      }),
      { numRuns: 250 },
    );
  });

  it('matches the definition when every object is planned, with many cycles', () => {
    fc.assert(
      fc.property(model(24), (m) => {
        const { g, objs } = build(m);
        const every = objs.map((_, i) => i);
        expect(actualPlan(g, objs)).toEqual(expectedPlan(m, every));
      }),
      { numRuns: 120 },
    );
  });

  it('puts a chain hanging below a cycle after the whole cycle, and a chain above it before', () => {
    // up2 → up1 → [a ⇄ b] → down1 → down2 ("→": destroyed before).
    const g = new ObjectGraph();
    const add = (name: string) => g.add({ id: name, type: 'T' });
    const [up2, up1, a, b, down1, down2] = [
      add('up2'),
      add('up1'),
      add('a'),
      add('b'),
      add('down1'),
      add('down2'),
    ];
    for (const [p, s] of [
      [up2, up1],
      [up1, a],
      [a, b],
      [b, a],
      [b, down1],
      [down1, down2],
    ] as const) {
      g.subscribeDestruction(p, s);
    }
    const plan = g.plan([down2, b, up2, down1, a, up1]);
    expect(plan.groups.map((group) => group.map((o) => o.id))).toEqual([
      ['up2'],
      ['up1'],
      ['a', 'b'],
      ['down1'],
      ['down2'],
    ]);
    expect(plan.cycles).toEqual([{ objects: ['a', 'b'], groups: [2], ownership: false }]);
  });

  it('splits a dependency cycle inside a cycle with ownership by depth, then layers the rest', () => {
    // owner ⊃ child ⊃ leaf; leaf and child depend on each other's destruction, and owner must go
    // before leaf: one cycle, whose dependency part {child, leaf} is itself a cycle (split by
    // depth: leaf, then child) and owner comes first by its dependency edge.
    const g = new ObjectGraph();
    const owner = g.add({ id: 'owner', type: 'T' });
    const child = g.add({ id: 'child', type: 'T', owner });
    const leaf = g.add({ id: 'leaf', type: 'T', owner: child });
    g.subscribeDestruction(leaf, child);
    g.subscribeDestruction(child, leaf);
    g.subscribeDestruction(owner, leaf);
    const plan = g.plan([leaf, child, owner]);
    expect(plan.groups.map((group) => group.map((o) => o.id))).toEqual([
      ['owner'],
      ['leaf'],
      ['child'],
    ]);
    expect(plan.cycles).toEqual([
      { objects: ['owner', 'leaf', 'child'], groups: [0, 1, 2], ownership: true },
    ]);
  });
  it('ranks a dependency cycle inside a cycle by the depths it holds, so the levels after it line up', () => {
    // R owns P, y, q, w, v, z; P owns P2, which owns x (depths: R 0, P 1, P2 2, x 3, the rest 1).
    // R goes before x and q; x and y go before each other, y before z; q before w, w before v.
    // Everything is one cycle through R. Its dependency part: R, P, P2 first; then q and the
    // cycle {x, y}, split by depth into x, then y (two levels, whatever depths lie between);
    // z right after y, level with v at the end of q → w → v.
    for (const firstX of [true, false]) {
      const g = new ObjectGraph();
      const R = g.add({ id: 'R', type: 'T' });
      const P = g.add({ id: 'P', type: 'T', owner: R });
      const P2 = g.add({ id: 'P2', type: 'T', owner: P });
      const x = g.add({ id: 'x', type: 'T', owner: P2 });
      const [y, q, w, v, z] = ['y', 'q', 'w', 'v', 'z'].map((name) =>
        g.add({ id: name, type: 'T', owner: R }),
      ) as [GraphObject, GraphObject, GraphObject, GraphObject, GraphObject];
      for (const [p, s] of [
        [R, x],
        [x, y],
        [y, x],
        [y, z],
        [R, q],
        [q, w],
        [w, v],
      ] as const) {
        g.subscribeDestruction(p, s);
      }
      const rest = [R, P, P2, q, w, v, z];
      const plan = g.plan(firstX ? [x, y, ...rest] : [y, x, ...rest]);
      expect(plan.groups.map((group) => group.map((o) => o.id))).toEqual([
        ['P2'],
        ['P'],
        ['R'],
        ['x'],
        ['q'],
        ['w', 'y'],
        ['v', 'z'],
      ]);
      expect(plan.cycles).toEqual([
        {
          objects: ['P2', 'P', 'R', 'x', 'q', 'w', 'y', 'v', 'z'],
          groups: [0, 1, 2, 3, 4, 5, 6],
          ownership: true,
        },
      ]);
    }
  });

  it('takes the longest way into a vertex whichever predecessor is laid out last', () => {
    // Two hand-built graphs, every vertex numbering tried ("→": destroyed before; ⇄: a cycle).
    // Components: S ⇄, S → p → q → t and R ⇄ → t, t → Z ⇄: t comes after q (level 3), not
    // after R alone (level 1), whichever of q and R is layered last.
    // Below a cycle: S ⇄, S → x → C ⇄ → u and S → v → u: u and v reach no cycle, and u comes
    // after C (level 3), not after v alone (level 2).
    const names = {
      components: ['s1', 's2', 'p', 'q', 't', 'r1', 'r2', 'z1', 'z2'],
      below: ['s1', 's2', 'x', 'c1', 'c2', 'u', 'v'],
    };
    const graphs: Array<[names: string[], edges: string[]]> = [
      [
        names.components,
        [
          's1 s2',
          's2 s1',
          's2 p',
          'p q',
          'q t',
          'r1 r2',
          'r2 r1',
          'r2 t',
          't z1',
          'z1 z2',
          'z2 z1',
        ],
      ],
      [names.below, ['s1 s2', 's2 s1', 's2 x', 'x c1', 'c1 c2', 'c2 c1', 'c2 u', 's2 v', 'v u']],
    ];
    for (const [vertexNames, edges] of graphs) {
      const n = vertexNames.length;
      for (let shift = 0; shift < n; shift++) {
        for (const reversed of [false, true]) {
          // The vertex numbered k is vertexNames[number(k)].
          const number = (k: number) => (reversed ? n - 1 - ((k + shift) % n) : (k + shift) % n);
          const index = new Map(vertexNames.map((_, k) => [vertexNames[number(k)]!, k]));
          const m: Model = {
            n,
            owners: vertexNames.map(() => null),
            subs: edges.map((edge) => {
              const [p, s] = edge.split(' ') as [string, string];
              return [index.get(p)!, index.get(s)!];
            }),
            chosen: vertexNames.map(() => true),
          };
          const { g, objs } = build(m);
          const every = objs.map((_, i) => i);
          expect(actualPlan(g, objs)).toEqual(expectedPlan(m, every));
        }
      }
    }
  });
});
