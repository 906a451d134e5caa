// One test per scenario of the spec's Testing section ("Dependency-driven multi-step resource
// deallocation"), in its order.
import { describe, expect, it } from 'vitest';
import {
  DestroyGraphError,
  ObjectGraph,
  isDestroyed,
  isDoomed,
  subscribeDestruction,
  unsubscribeDestruction,
} from '../src/index.js';
import type { GraphObject } from '../src/index.js';

const ids = (objects: readonly GraphObject[]) => objects.map((o) => o.id).sort();

function typed(): ObjectGraph {
  return new ObjectGraph({
    types: {
      Base: { properties: { input: 'persistent', output: 'persistent', cache: 'runtime' } },
      Derived: { extends: 'Base', properties: { own: 'persistent', ownRuntime: 'runtime' } },
      Thing: {},
    },
  });
}

describe('runtime garbage collection', () => {
  it('objects in persistent properties (own and inherited) of reachable objects are not collected', () => {
    const g = typed();
    const root = g.add({ id: 'root', type: 'Derived', root: true });
    const a = g.add({ id: 'a', type: 'Thing' });
    const b = g.add({ id: 'b', type: 'Thing' });
    const c = g.add({ id: 'c', type: 'Thing' });
    g.set(root, 'own', a); // declared on Derived
    g.set(root, 'input', b); // inherited from Base
    g.set(a, 'next', c, { kind: 'persistent' });
    for (const scope of ['persistent', 'complete'] as const)
      expect(g.collect({ scope })).toEqual([]);
  });

  it('objects in runtime and undeclared properties (own and inherited) of reachable objects are not collected', () => {
    const g = typed();
    const root = g.add({ id: 'root', type: 'Derived', root: true });
    const own = g.add({ id: 'own', type: 'Thing' });
    const inherited = g.add({ id: 'inherited', type: 'Thing' });
    const undeclared = g.add({ id: 'undeclared', type: 'Thing' });
    g.set(root, 'ownRuntime', own);
    g.set(root, 'cache', inherited);
    g.set(root, 'scratch', undeclared);
    expect(g.collect({ scope: 'complete' })).toEqual([]);
    // The post-deployment collection only follows the persistable graph.
    expect(ids(g.collect({ scope: 'persistent' }))).toEqual(['inherited', 'own', 'undeclared']);
  });

  it('objects in static properties are not collected', () => {
    const g = typed();
    const kept = g.add({ id: 'kept', type: 'Thing' });
    const child = g.add({ id: 'child', type: 'Derived' });
    g.set(kept, 'child', child, { kind: 'persistent' });
    g.setStatic('Registry', 'default', kept);
    for (const scope of ['persistent', 'complete'] as const)
      expect(g.collect({ scope })).toEqual([]);
    g.setStatic('Registry', 'default', null);
    expect(ids(g.collect())).toEqual(['child', 'kept']);
  });

  it('objects held outside the graph by the application (pins) are not collected until released', async () => {
    const g = typed();
    const held = g.add({ id: 'held', type: 'Thing' });
    {
      await using _pin = g.pin(held);
      expect(g.collect({ scope: 'complete' })).toEqual([]);
    }
    expect(ids(g.collect({ scope: 'complete' }))).toEqual(['held']);
  });

  it('objects referenced from the current stack frame (pins, arguments included) are not collected', async () => {
    const g = typed();
    const local = g.add({ id: 'local', type: 'Thing' });
    const arg = g.add({ id: 'arg', type: 'Thing' });
    const reached = g.add({ id: 'reached', type: 'Thing' });
    g.set(local, 'ref', reached);
    const method = async (argument: GraphObject) => {
      await using _a = g.pin(argument);
      await using _l = g.pin(local);
      return ids(g.collect({ scope: 'complete' }));
    };
    expect(await method(arg)).toEqual([]);
    expect(ids(g.collect({ scope: 'complete' }))).toEqual(['arg', 'local', 'reached']);
  });

  it('a single unreferenced object is collected', () => {
    const g = typed();
    g.add({ id: 'root', type: 'Thing', root: true });
    g.add({ id: 'lonely', type: 'Thing' });
    expect(ids(g.collect())).toEqual(['lonely']);
    expect(ids(g.collect({ scope: 'persistent' }))).toEqual(['lonely']);
  });

  it('a graph of interconnected objects referenced by no live object is collected', () => {
    const g = typed();
    const root = g.add({ id: 'root', type: 'Derived', root: true });
    const a = g.add({ id: 'a', type: 'Derived' });
    const b = g.add({ id: 'b', type: 'Derived' });
    const c = g.add({ id: 'c', type: 'Derived' });
    g.set(a, 'own', b);
    g.set(b, 'input', c);
    g.set(c, 'output', a); // a cycle
    g.set(a, 'input', root); // referencing a live object does not help
    expect(ids(g.collect())).toEqual(['a', 'b', 'c']);
  });

  it('pins released by every holder let their objects be collected', () => {
    const g = typed();
    const o = g.add({ id: 'o', type: 'Thing' });
    const p1 = g.pin(o);
    const p2 = g.pin(o);
    p1.release();
    p1.release(); // idempotent
    expect(g.collect()).toEqual([]);
    p2[Symbol.dispose]();
    expect(ids(g.collect())).toEqual(['o']);
  });

  it('pins taken by concurrent tasks (other "green threads") keep their objects during a collection', async () => {
    const g = typed();
    const x = g.add({ id: 'x', type: 'Thing' });
    g.add({ id: 'y', type: 'Thing' });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const worker = async () => {
      await using _p = g.pin(x);
      await gate;
    };
    const running = worker();
    await Promise.resolve();
    const report = await g.gc({ scope: 'complete' });
    expect(report.destroyed).toEqual(['y']);
    expect(g.has(x)).toBe(true);
    release();
    await running;
    expect((await g.gc()).destroyed).toEqual(['x']);
  });
});

describe('destruction dependency resolution order', () => {
  async function order(build: (g: ObjectGraph, log: string[]) => void): Promise<string[]> {
    const log: string[] = [];
    const g = new ObjectGraph();
    build(g, log);
    await g.gc();
    return log;
  }
  const d = (log: string[]) => (o: GraphObject) => void log.push(o.id);

  it('a child with a destruction dependency on its parent is destroyed after the parent', async () => {
    const log = await order((g, log) => {
      const parent = g.add({ id: 'parent', type: 'T', destroy: d(log) });
      const child = g.add({ id: 'child', type: 'T', owner: parent, destroy: d(log) });
      g.set(parent, 'child', child);
      subscribeDestruction(parent, child);
    });
    expect(log).toEqual(['parent', 'child']);
  });

  it('a parent with a destruction dependency on its child is destroyed after the child', async () => {
    const log = await order((g, log) => {
      const parent = g.add({ id: 'parent', type: 'T', destroy: d(log) });
      const child = g.add({ id: 'child', type: 'T', owner: parent, destroy: d(log) });
      subscribeDestruction(child, parent);
    });
    expect(log).toEqual(['child', 'parent']);
  });

  it('without any dependency, owned objects are destroyed before their owner', async () => {
    const log = await order((g, log) => {
      const parent = g.add({ id: 'parent', type: 'T', destroy: d(log) });
      g.add({ id: 'child', type: 'T', owner: parent, destroy: d(log) });
    });
    expect(log).toEqual(['child', 'parent']);
  });

  it('between unrelated objects, the dependency is destroyed before the dependent', async () => {
    const log = await order((g, log) => {
      const dependent = g.add({ id: 'a-dependent', type: 'T', destroy: d(log) });
      const dependency = g.add({ id: 'z-dependency', type: 'T', destroy: d(log) });
      subscribeDestruction(dependency, dependent);
    });
    expect(log).toEqual(['z-dependency', 'a-dependent']);
  });

  it('objects with a circular destruction dependency are all destroyed', async () => {
    const g = new ObjectGraph();
    const log: string[] = [];
    const [a, b, c] = ['a', 'b', 'c'].map((id) => g.add({ id, type: 'T', destroy: d(log) })) as [
      GraphObject,
      GraphObject,
      GraphObject,
    ];
    subscribeDestruction(a, b);
    subscribeDestruction(b, c);
    subscribeDestruction(c, a);
    const plan = g.plan(g.collect());
    expect(plan.cycles).toHaveLength(1);
    expect(plan.cycles[0]!.objects.slice().sort()).toEqual(['a', 'b', 'c']);
    const report = await g.destroy(plan);
    expect(report.status).toBe('completed');
    expect(log.slice().sort()).toEqual(['a', 'b', 'c']);
  });
});

describe('destruction events (A depends on B, B is collected)', () => {
  function base() {
    const g = new ObjectGraph();
    const log: string[] = [];
    const a = g.add({ id: 'A', type: 'T', root: true });
    const b = g.add({ id: 'B', type: 'T', destroy: () => void log.push('B.destroy') });
    const handler = (publisher: GraphObject) => void log.push(`A notified about ${publisher.id}`);
    return { g, a, b, log, handler };
  }

  it('events come in order: B scheduled, A notified, B.destroy, B destroyed', async () => {
    const { g, a, b, log, handler } = base();
    subscribeDestruction(b, a, handler);
    g.events.on('destroy:scheduled', (e) => log.push(`${e.id} scheduled`));
    g.events.on('destroy:notified', (e) => log.push(`${e.subscriber} notified event for ${e.id}`));
    g.events.on('destroy:destroyed', (e) => log.push(`${e.id} destroyed`));
    await g.gc();
    expect(log).toEqual([
      'B scheduled',
      'A notified about B',
      'A notified event for B',
      'B.destroy',
      'B destroyed',
    ]);
  });

  it('A prevents B from leaving the graph by referencing it in the handler; B is kept, marked destroyed', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'A', type: 'T', root: true });
    const b = g.add({ id: 'B', type: 'T', value: { name: 'b', ping: () => 'pong' } });
    subscribeDestruction(b, a, (publisher) => g.set(a, 'kept', publisher));
    const report = await g.gc();
    expect(report.resurrected).toEqual(['B']);
    expect(report.dropped).toEqual([]);
    expect(g.has(b)).toBe(true);
    expect(isDestroyed(b)).toBe(true);
    const guarded = g.guard(b);
    expect(guarded.name).toBe('b'); // properties stay readable
    expect(() => guarded.ping()).toThrow(DestroyGraphError);
    try {
      guarded.ping();
    } catch (error) {
      expect(DestroyGraphError.hasCode(error, 'destroy-graph.destroyed_object')).toBe(true);
    }
    // Kept objects are never destroyed twice; once unreferenced they are dropped.
    expect(g.collect()).toEqual([]);
    g.set(a, 'kept', null);
    expect(g.collect()).toEqual([]);
    expect(g.has(b)).toBe(false);
  });

  it('A subscribing several times is notified once', async () => {
    const { g, a, b, log, handler } = base();
    for (let i = 0; i < 3; i++) subscribeDestruction(b, a, handler);
    await g.gc();
    expect(log.filter((l) => l.startsWith('A notified'))).toHaveLength(1);
  });

  it('A removing its dependency is not notified', async () => {
    const { g, a, b, log, handler } = base();
    subscribeDestruction(b, a, handler);
    unsubscribeDestruction(b, a, handler);
    await g.gc();
    expect(log).toEqual(['B.destroy']);
  });

  it.each([
    [3, 2],
    [5, 1],
  ])(
    'A subscribing N=%i times and unsubscribing M=%i times (N > M) is still notified',
    async (n, m) => {
      const { g, a, b, log, handler } = base();
      for (let i = 0; i < n; i++) subscribeDestruction(b, a, handler);
      for (let i = 0; i < m; i++) unsubscribeDestruction(b, a);
      expect(g.subscriptionCount(b, a)).toBe(n - m);
      await g.gc();
      expect(log).toEqual(['A notified about B', 'B.destroy']);
    },
  );

  it.each([
    [2, 2],
    [2, 5],
  ])(
    'A subscribing N=%i times and unsubscribing M=%i times (N <= M) is not notified',
    async (n, m) => {
      const { g, a, b, log, handler } = base();
      for (let i = 0; i < n; i++) subscribeDestruction(b, a, handler);
      for (let i = 0; i < m; i++) unsubscribeDestruction(b, a);
      expect(g.subscriptionCount(b, a)).toBe(0);
      await g.gc();
      expect(log).toEqual(['B.destroy']);
    },
  );

  it('B may subscribe to its own destruction', async () => {
    const { g, b, log } = base();
    subscribeDestruction(
      b,
      b,
      (publisher, { subscriber }) =>
        void log.push(`${subscriber.id} notified about ${publisher.id}`),
    );
    const plan = g.plan(g.collect());
    expect(plan.cycles).toEqual([]);
    await g.destroy(plan);
    expect(log).toEqual(['B notified about B', 'B.destroy']);
  });

  it('isDoomed and isDestroyed answer correctly in handlers and destroy functions', async () => {
    const g = new ObjectGraph();
    const seen: Record<string, boolean> = {};
    const a = g.add({ id: 'A', type: 'T', root: true });
    const b = g.add({
      id: 'B',
      type: 'T',
      destroy: (self) => {
        seen.destroyB_doomed = isDoomed(self);
        seen.destroyB_destroyed = isDestroyed(self);
        seen.destroyB_otherDoomed = isDoomed(c);
      },
    });
    const c = g.add({
      id: 'C',
      type: 'T',
      destroy: () => {
        seen.destroyC_BDestroyed = isDestroyed(b);
      },
    });
    subscribeDestruction(b, c); // C after B
    subscribeDestruction(b, a, (publisher) => {
      seen.handler_BDoomed = isDoomed(publisher);
      seen.handler_BDestroyed = isDestroyed(publisher);
      seen.handler_ADoomed = isDoomed(a);
    });
    expect(isDoomed(b)).toBe(false);
    await g.gc();
    expect(seen).toEqual({
      handler_BDoomed: true,
      handler_BDestroyed: false,
      handler_ADoomed: false,
      destroyB_doomed: true,
      destroyB_destroyed: false,
      destroyB_otherDoomed: true,
      destroyC_BDestroyed: true,
    });
    expect(isDoomed(a)).toBe(false);
  });
});
