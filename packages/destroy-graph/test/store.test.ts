import { describe, expect, it } from 'vitest';
import { ObjectGraph } from '../src/index.js';
import type { GraphObject } from '../src/index.js';
import type { Node } from '../src/graph.js';

describe('compact storage', () => {
  it('renumbers after many objects left the graph, keeping every order and answer', async () => {
    const g = new ObjectGraph({ types: { T: { properties: { next: 'persistent' } } } });
    const keep: GraphObject[] = [];
    const all: GraphObject[] = [];
    for (let i = 0; i < 3000; i++) {
      const kept = i % 5 === 0;
      const o = g.add({ id: `o${String(i).padStart(4, '0')}`, type: 'T' });
      all.push(o);
      if (kept) keep.push(o);
    }
    // Kept objects form a rooted chain; each has an owned child and a dependency on a neighbour.
    g.addRoot(keep[0]!);
    for (let k = 1; k < keep.length; k++) g.set(keep[k - 1]!, 'next', keep[k]!);
    const children = keep.map((o, k) => g.add({ id: `c${k}`, type: 'T', owner: o }));
    keep.forEach((o, k) => g.set(o, 'child', children[k]!, { kind: 'persistent' }));
    for (let k = 1; k < keep.length; k++) {
      g.subscribeDestruction(keep[k - 1]!, keep[k]!, 'h');
      g.set(children[k]!, 'back', [keep[k - 1]!, all[k * 5 + 1]!]);
    }
    g.set(children[0]!, 'next', keep[0]!);
    const report = await g.gc({ scope: 'persistent' });
    expect(report.dropped.length).toBeGreaterThan(1024);
    // Renumbered: indices are dense again, no index of a dropped object is left.
    const indices = [...g.objects()].map((o) => (o as Node).index);
    expect(Math.max(...indices)).toBe(g.size - 1);
    // A copy that never dropped anything answers the same.
    const copy = ObjectGraph.deserialize(g.serialize(), {
      types: { T: { properties: { next: 'persistent' } } },
    });
    expect(copy.serialize()).toEqual(g.serialize());
    const live = [...g.objects()];
    expect(JSON.stringify(g.plan(live))).toBe(
      JSON.stringify(copy.plan([...copy.objects()].map((o) => o.id))),
    );
    // Any iterable of handles or ids plans the same.
    expect(JSON.stringify(g.plan(g.objects()))).toBe(JSON.stringify(g.plan(live)));
    expect(JSON.stringify(g.plan(new Set(live.map((o) => o.id))))).toBe(
      JSON.stringify(g.plan(live)),
    );
    for (const o of [keep[3]!, children[7]!, keep[keep.length - 1]!]) {
      expect(g.explain(o)).toEqual(copy.explain(copy.get(o.id)!));
    }
    expect(g.read(children[1]!, 'back')).toEqual([keep[0], all[6]]);
    expect(children[5]!.owner).toBe(keep[5]);
    expect(g.subscriptionCount(keep[1]!, keep[2]!)).toBe(1);
    // Handles of dropped objects are refused; new objects get fresh indices.
    expect(g.has(all[1]!)).toBe(false);
    const fresh = g.add({ id: 'o0001', type: 'T', owner: keep[2]! });
    g.set(fresh, 'next', keep[1]!);
    expect(g.read(fresh, 'next')).toBe(keep[1]);
    expect(g.plan([fresh, keep[2]!]).groups.map((x) => x.map((o) => o.id))).toEqual([
      ['o0001'],
      ['o0010'],
    ]);
  });
});
