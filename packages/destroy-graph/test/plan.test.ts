import { describe, expect, it } from 'vitest';
import { DestroyGraphError, ObjectGraph, subscribeDestruction } from '../src/index.js';
import type { GraphObject, PlanJSON } from '../src/index.js';

const groupIds = (groups: ReadonlyArray<readonly GraphObject[]>) =>
  groups.map((g) => g.map((o) => o.id));

describe('plan', () => {
  it('layers what hangs below a dependency cycle after it (a tenant owning everything)', () => {
    const g = new ObjectGraph();
    const tenant = g.add({ id: 'tenant', type: 'Tenant', root: true });
    const [a, b, c, d, e] = ['a', 'b', 'c', 'd', 'e'].map((id) =>
      g.add({ id, type: 'T', owner: tenant }),
    ) as [GraphObject, GraphObject, GraphObject, GraphObject, GraphObject];
    // a and b depend on each other; c depends on a, d on c, e on both d and b.
    subscribeDestruction(a, b);
    subscribeDestruction(b, a);
    subscribeDestruction(a, c);
    subscribeDestruction(c, d);
    subscribeDestruction(d, e);
    subscribeDestruction(b, e);
    const plan = g.plan([tenant, a, b, c, d, e]);
    expect(groupIds(plan.groups)).toEqual([['a', 'b'], ['c'], ['d'], ['e'], ['tenant']]);
    expect(plan.cycles).toEqual([{ objects: ['a', 'b'], groups: [0], ownership: false }]);
  });

  it('layers the Application / Network / VMs example', () => {
    const g = new ObjectGraph();
    const app = g.add({ id: 'app', type: 'Application' });
    const net = g.add({ id: 'net', type: 'Network', owner: app });
    const vm2 = g.add({ id: 'vm-2', type: 'VM', owner: app });
    const vm1 = g.add({ id: 'vm-1', type: 'VM', owner: app });
    subscribeDestruction(vm1, net);
    subscribeDestruction(vm2, net);
    const plan = g.plan([app, net, vm1, vm2]);
    expect(groupIds(plan.groups)).toEqual([['vm-1', 'vm-2'], ['net'], ['app']]);
    expect(plan.groupOf(net)).toBe(1);
    expect(plan.edges).toContainEqual({
      before: 'vm-1',
      after: 'net',
      reason: 'dependency',
      transitive: false,
      satisfied: true,
    });
    expect(plan.edges.filter((e) => e.after === 'app').map((e) => e.reason)).toEqual([
      'owner',
      'owner',
      'owner',
    ]);
  });

  it('is JSON: groups, cycles and edges survive JSON.stringify, and destroy() accepts the JSON', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'a', type: 'T' });
    const b = g.add({ id: 'b', type: 'T', owner: a });
    const plan = g.plan([a, b]);
    const json = JSON.parse(JSON.stringify(plan)) as PlanJSON;
    expect(json).toEqual({
      format: 'rigging.destroy-plan',
      version: 1,
      objects: 2,
      groups: [
        { index: 0, objects: [{ id: 'b', type: 'T' }] },
        { index: 1, objects: [{ id: 'a', type: 'T' }] },
      ],
      cycles: [],
      edges: [{ before: 'b', after: 'a', reason: 'owner', transitive: false, satisfied: true }],
    });
    const report = await g.destroy(json);
    expect(report.destroyed).toEqual(['b', 'a']);
    expect(g.size).toBe(0);
  });

  it('honours relations through objects outside the plan (transitive ownership and dependencies)', () => {
    const g = new ObjectGraph();
    const top = g.add({ id: 'top', type: 'T' });
    const middle = g.add({ id: 'middle', type: 'T', owner: top, root: true });
    const leaf = g.add({ id: 'leaf', type: 'T', owner: middle });
    const x = g.add({ id: 'x', type: 'T' });
    const hub = g.add({ id: 'hub', type: 'T', root: true });
    const y = g.add({ id: 'y', type: 'T' });
    subscribeDestruction(x, hub); // hub after x
    subscribeDestruction(hub, y); // y after hub, so y after x
    const plan = g.plan([y, top, x, leaf]);
    expect(groupIds(plan.groups)).toEqual([
      ['leaf', 'x'],
      ['top', 'y'],
    ]);
    expect(plan.edges).toContainEqual({
      before: 'leaf',
      after: 'top',
      reason: 'owner',
      transitive: true,
      satisfied: true,
    });
  });

  it('reports a cycle and breaks it deterministically: ownership depth (deepest first), then id', () => {
    const g = new ObjectGraph();
    const root = g.add({ id: 'r', type: 'T' });
    const deep = g.add({ id: 'd', type: 'T', owner: root });
    const b = g.add({ id: 'b', type: 'T' });
    const a = g.add({ id: 'a', type: 'T' });
    for (const [p, s] of [
      [a, b],
      [b, deep],
      [deep, a],
    ] as const) {
      subscribeDestruction(p, s);
    }
    const plan = g.plan([a, b, deep]);
    expect(groupIds(plan.groups)).toEqual([['d'], ['a', 'b']]);
    expect(plan.cycles).toEqual([{ objects: ['d', 'a', 'b'], groups: [0, 1], ownership: false }]);
    expect(plan.edges.filter((e) => !e.satisfied).length).toBeGreaterThan(0);
    expect(plan.format()).toContain('cycle 1: d, a, b (circular dependency');
  });

  it('lets explicit dependencies win over ownership inside a cycle', () => {
    const g = new ObjectGraph();
    const parent = g.add({ id: 'parent', type: 'T' });
    const child = g.add({ id: 'child', type: 'T', owner: parent });
    const grandchild = g.add({ id: 'grandchild', type: 'T', owner: child });
    subscribeDestruction(parent, grandchild);
    const plan = g.plan([parent, child, grandchild]);
    expect(plan.cycles).toHaveLength(1);
    expect(plan.cycles[0]!.ownership).toBe(true);
    expect(plan.groupOf(parent)).toBeLessThan(plan.groupOf(grandchild));
    // The tie order inside the cycle: deeper first among the undecided ones.
    expect(plan.groupOf(child)).toBeLessThan(plan.groupOf(parent));
  });

  it('skips destroyed objects and refuses objects of another graph', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'a', type: 'T', root: true });
    const b = g.add({ id: 'b', type: 'T' });
    subscribeDestruction(b, a, (p) => g.set(a, 'keep', p));
    await g.gc();
    expect(g.plan([a, b]).size).toBe(1);
    const other = new ObjectGraph().add({ id: 'z', type: 'T' });
    expect(() => g.plan([other])).toThrow(DestroyGraphError);
    expect(() => g.plan(['nope'])).toThrow(/not in this graph/);
  });

  it('handles a 200,000-object ownership chain and dependency chain without recursion', () => {
    const g = new ObjectGraph();
    let prev = g.add({ id: 'n0', type: 'T' });
    const all = [prev];
    for (let i = 1; i < 200_000; i++) {
      const next = g.add({ id: `n${i}`, type: 'T', owner: prev });
      if (i % 2 === 0) subscribeDestruction(next, prev);
      all.push(next);
      prev = next;
    }
    const plan = g.plan(all);
    expect(plan.size).toBe(200_000);
    expect(plan.groups[0]![0]!.id).toBe('n199999');
    expect(g.collect()).toHaveLength(200_000);
  }, 120_000);

  it('lists each group by ownership depth (deepest first), then id, for small and large plans alike', () => {
    const g = new ObjectGraph();
    const top = g.add({ id: 'top', type: 'T' });
    const mid = g.add({ id: 'mid', type: 'T', owner: top });
    const chosen = [
      g.add({ id: 'b', type: 'T' }),
      g.add({ id: 'deep', type: 'T', owner: mid }),
      g.add({ id: 'a', type: 'T' }),
      g.add({ id: 'c', type: 'T', owner: top }),
    ];
    for (let i = 0; i < 100; i++) g.add({ id: `filler-${i}`, type: 'T' });
    const small = g.plan(chosen); // 4 of 106 objects: sorted
    expect(groupIds(small.groups)).toEqual([['deep', 'c', 'a', 'b']]);
    g.add({ id: 'late-0', type: 'T' }); // merged into the cached id order
    const large = g.plan(g.objects()); // every object: listed from the cached id order
    const first = large.groups[0]!.map((o) => o.id);
    expect(first.slice(0, 2)).toEqual(['deep', 'c']);
    expect(first.slice(2)).toEqual(first.slice(2).sort());
    expect(first).toContain('late-0');
  });

  it('prints a plan with reasons', () => {
    const g = new ObjectGraph();
    const app = g.add({ id: 'app', type: 'Application' });
    const net = g.add({ id: 'net', type: 'Network', owner: app });
    const vm = g.add({ id: 'vm', type: 'VM', owner: app });
    subscribeDestruction(vm, net);
    expect(String(g.plan([app, net, vm]))).toBe(
      [
        'destruction plan: 3 object(s) in 3 group(s), 0 cycle(s)',
        'group 0',
        '  vm (VM)',
        'group 1',
        '  net (Network)  after vm [depends on it]',
        'group 2',
        '  app (Application)  after net [owns it], vm [owns it]',
      ].join('\n'),
    );
  });
});
