import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ObjectGraph } from '../src/index.js';
import type { GraphObject, ReferenceKind } from '../src/index.js';

interface Model {
  n: number;
  owners: Array<number | null>;
  refs: Array<[number, number, ReferenceKind]>;
  subs: Array<[number, number]>; // [publisher, subscriber]
  roots: number[];
  pins: number[];
}

const model: fc.Arbitrary<Model> = fc.integer({ min: 1, max: 28 }).chain((n) => {
  const idx = fc.integer({ min: 0, max: n - 1 });
  return fc.record({
    n: fc.constant(n),
    owners: fc.tuple(
      ...Array.from({ length: n }, (_, i) =>
        i === 0 ? fc.constant(null) : fc.option(fc.integer({ min: 0, max: i - 1 }), { freq: 3 }),
      ),
    ),
    refs: fc.array(fc.tuple(idx, idx, fc.constantFrom<ReferenceKind>('persistent', 'runtime')), {
      maxLength: 2 * n,
    }),
    subs: fc.array(fc.tuple(idx, idx), { maxLength: 2 * n }),
    roots: fc.array(idx, { maxLength: 3 }),
    pins: fc.array(idx, { maxLength: 2 }),
  });
});

function build(m: Model): { g: ObjectGraph; objs: GraphObject[] } {
  const g = new ObjectGraph();
  const objs: GraphObject[] = [];
  for (let i = 0; i < m.n; i++) {
    const owner = m.owners[i];
    objs.push(
      g.add({
        id: `o${String(i).padStart(2, '0')}`,
        type: 'T',
        owner: owner == null ? null : objs[owner]!,
      }),
    );
  }
  const byFrom = new Map<number, Array<[number, ReferenceKind]>>();
  for (const [from, to, kind] of m.refs) {
    const list = byFrom.get(from) ?? [];
    list.push([to, kind]);
    byFrom.set(from, list);
  }
  for (const [from, list] of byFrom) {
    list.forEach(([to, kind], k) => g.set(objs[from]!, `p${k}`, objs[to]!, { kind }));
  }
  for (const [p, s] of m.subs) g.subscribeDestruction(objs[p]!, objs[s]!);
  for (const r of m.roots) g.addRoot(objs[r]!);
  for (const p of m.pins) g.pin(objs[p]!);
  return { g, objs };
}

/** Naive reachability (the oracle). */
function reachable(m: Model, complete: boolean): Set<number> {
  const seen = new Set<number>([...m.roots, ...(complete ? m.pins : [])]);
  const queue = [...seen];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const [from, to, kind] of m.refs) {
      if (from === v && (complete || kind === 'persistent') && !seen.has(to)) {
        seen.add(to);
        queue.push(to);
      }
    }
  }
  return seen;
}

function closure(n: number, edges: Array<[number, number]>): boolean[][] {
  const reach = Array.from({ length: n }, () => new Array<boolean>(n).fill(false));
  for (let s = 0; s < n; s++) {
    const queue = [s];
    while (queue.length > 0) {
      const v = queue.shift()!;
      for (const [a, b] of edges) {
        if (a === v && !reach[s]![b]) {
          reach[s]![b] = true;
          queue.push(b);
        }
      }
    }
  }
  return reach;
}

describe('properties', () => {
  it('every plan respects every ownership edge (outside reported cycles) and every non-mutual dependency', () => {
    fc.assert(
      fc.property(model, fc.array(fc.boolean(), { minLength: 28, maxLength: 28 }), (m, chosen) => {
        const { g, objs } = build(m);
        const planned = objs.filter((_, i) => chosen[i]);
        const plan = g.plan(planned);
        const group = (i: number) => plan.groupOf(objs[i]!);
        // owns[a][b]: a owns b, transitively.
        const owns = closure(
          m.n,
          m.owners.flatMap((o, i) => (o == null ? [] : [[o, i] as [number, number]])),
        );
        // dep[a][b]: a depends on b, transitively (subscriber -> publisher).
        const dep = closure(
          m.n,
          m.subs.map(([p, s]) => [s, p] as [number, number]),
        );
        const sameCycle = (a: number, b: number) =>
          plan.cycles.some(
            (c) => c.objects.includes(objs[a]!.id) && c.objects.includes(objs[b]!.id),
          );
        for (let a = 0; a < m.n; a++) {
          if (!chosen[a]) continue;
          for (let b = 0; b < m.n; b++) {
            if (!chosen[b] || a === b) continue;
            if (dep[a]![b] && !dep[b]![a]) expect(group(a)).toBeGreaterThan(group(b));
            if (owns[a]![b] && !sameCycle(a, b)) expect(group(a)).toBeGreaterThan(group(b));
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('every collected object appears in the plan exactly once, and nothing else does', () => {
    fc.assert(
      fc.property(
        model,
        fc.constantFrom('persistent' as const, 'complete' as const),
        (m, scope) => {
          const { g } = build(m);
          const collected = g.collect({ scope });
          const plan = g.plan([...collected, ...collected]);
          const flat = plan.groups.flat().map((o) => o.id);
          expect(flat.length).toBe(collected.length);
          expect(new Set(flat)).toEqual(new Set(collected.map((o) => o.id)));
          expect(plan.size).toBe(collected.length);
          expect(plan.groups.every((grp) => grp.length > 0)).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('collect never returns a reachable object (and returns every unreachable one)', () => {
    fc.assert(
      fc.property(
        model,
        fc.constantFrom('persistent' as const, 'complete' as const),
        (m, scope) => {
          const { g, objs } = build(m);
          const alive = reachable(m, scope === 'complete');
          const expected = objs.filter((_, i) => !alive.has(i)).map((o) => o.id);
          expect(g.collect({ scope }).map((o) => o.id)).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a run destroys in plan order and leaves no collected object behind', async () => {
    await fc.assert(
      fc.asyncProperty(model, async (m) => {
        const { g } = build(m);
        const order: string[] = [];
        g.events.on('destroy:destroyed', (e) => order.push(e.id));
        const plan = g.plan(g.collect());
        const report = await g.destroy(plan, { concurrency: 3 });
        expect(report.status).toBe('completed');
        expect(
          order.map((id) => plan.groupOf(plan.groups.flat().find((o) => o.id === id)!)),
        ).toEqual(
          [...order.map((id) => plan.groupOf(plan.groups.flat().find((o) => o.id === id)!))].sort(
            (x, y) => x - y,
          ),
        );
        expect(g.collect()).toEqual([]);
      }),
      { numRuns: 100 },
    );
  });
});
