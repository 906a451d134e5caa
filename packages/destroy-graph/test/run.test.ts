import { ManualClock, deferred } from '@rigging/core';
import { describe, expect, it } from 'vitest';
import {
  DestroyGraphError,
  ObjectGraph,
  diff,
  explain,
  subscribeDestruction,
} from '../src/index.js';
import type { DestroyGraphEvents, GraphObject } from '../src/index.js';

function recordEvents(g: ObjectGraph): Array<[string, unknown]> {
  const seen: Array<[string, unknown]> = [];
  g.events.onAny((event, payload) => seen.push([event, payload]));
  return seen;
}

describe('destroy runs', () => {
  it('emits typed events with their payloads, in step order', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'a', type: 'A', root: true });
    const b = g.add({ id: 'b', type: 'B' });
    subscribeDestruction(b, a, () => {});
    const seen = recordEvents(g);
    await g.gc();
    const stripped = seen.map(([event, payload]) => {
      const p = { ...(payload as Record<string, unknown>) };
      if ('durationMs' in p) p.durationMs = 0;
      return [event, p];
    });
    expect(stripped).toEqual([
      ['destroy:started', { runId: 1, objects: 1, groups: 1 }],
      ['destroy:scheduled', { runId: 1, id: 'b', type: 'B', group: 0 }],
      ['destroy:notified', { runId: 1, id: 'b', subscriber: 'a', group: 0 }],
      ['destroy:destroying', { runId: 1, id: 'b', type: 'B', group: 0 }],
      ['destroy:destroyed', { runId: 1, id: 'b', type: 'B', group: 0, durationMs: 0 }],
      ['object:dropped', { id: 'b', type: 'B' }],
      [
        'destroy:finished',
        { runId: 1, status: 'completed', destroyed: 1, failed: 0, pending: 0, resurrected: 0 },
      ],
    ] satisfies Array<[keyof DestroyGraphEvents, unknown]>);
  });

  it('notifies in reverse group order, destroys in direct order', async () => {
    const g = new ObjectGraph();
    const log: string[] = [];
    const watcher = g.add({ id: 'watcher', type: 'W', root: true });
    const owner = g.add({ id: 'owner', type: 'T', destroy: () => void log.push('destroy owner') });
    const owned = g.add({
      id: 'owned',
      type: 'T',
      owner,
      destroy: () => void log.push('destroy owned'),
    });
    for (const o of [owner, owned])
      subscribeDestruction(o, watcher, (p) => void log.push(`notify ${p.id}`));
    await g.gc();
    expect(log).toEqual(['notify owner', 'notify owned', 'destroy owned', 'destroy owner']);
  });

  it('runs a group in parallel, at most `concurrency` at once', async () => {
    const g = new ObjectGraph();
    let running = 0;
    let peak = 0;
    const gates = Array.from({ length: 6 }, () => deferred<void>());
    for (let i = 0; i < 6; i++) {
      g.add({
        id: `o${i}`,
        type: 'T',
        destroy: async () => {
          running++;
          peak = Math.max(peak, running);
          await gates[i]!.promise;
          running--;
        },
      });
    }
    const run = g.gc({ concurrency: 2 });
    for (const gate of gates) {
      await new Promise((r) => setTimeout(r, 5));
      gate.resolve();
    }
    const report = await run;
    expect(report.destroyed).toHaveLength(6);
    expect(peak).toBe(2);
  });

  it("policy 'stop' finishes the failing group, leaves later groups pending, and the plan resumes", async () => {
    const g = new ObjectGraph();
    let fail = true;
    const log: string[] = [];
    const top = g.add({ id: 'top', type: 'T', destroy: () => void log.push('top') });
    g.add({
      id: 'bad',
      type: 'T',
      owner: top,
      destroy: () => {
        if (fail) throw new Error('cloud said no');
        log.push('bad');
      },
    });
    g.add({ id: 'good', type: 'T', owner: top, destroy: () => void log.push('good') });
    const plan = g.plan(g.collect());
    const first = await g.destroy(plan);
    expect(first.status).toBe('stopped');
    expect(first.destroyed).toEqual(['good']);
    expect(first.failed).toMatchObject([
      { id: 'bad', step: 'destroy', timedOut: false, error: { message: 'cloud said no' } },
    ]);
    expect(first.pending.sort()).toEqual(['bad', 'top']);
    expect(g.has('good')).toBe(false);
    fail = false;
    const second = await g.destroy(plan);
    expect(second.status).toBe('completed');
    expect(second.destroyed).toEqual(['bad', 'top']);
    expect(log).toEqual(['good', 'bad', 'top']);
    expect(g.size).toBe(0);
  });

  it("policy 'continue' destroys the rest", async () => {
    const g = new ObjectGraph();
    const top = g.add({ id: 'top', type: 'T' });
    g.add({
      id: 'bad',
      type: 'T',
      owner: top,
      destroy: () => {
        throw new Error('no');
      },
    });
    const report = await g.gc({ policy: 'continue' });
    expect(report.status).toBe('completed');
    expect(report.destroyed).toEqual(['top']);
    expect(report.pending).toEqual(['bad']);
    expect(g.has('bad')).toBe(true);
  });

  it('a failing handler stops the run before anything is destroyed (stop policy)', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'a', type: 'T', root: true });
    const b = g.add({ id: 'b', type: 'T' });
    subscribeDestruction(b, a, () => {
      throw new Error('handler broke');
    });
    const failed: Array<DestroyGraphEvents['destroy:failed']> = [];
    g.events.on('destroy:failed', (e) => failed.push(e));
    const report = await g.gc();
    expect(report.status).toBe('stopped');
    expect(report.destroyed).toEqual([]);
    expect(failed).toMatchObject([{ id: 'b', subscriber: 'a', step: 'notify', timedOut: false }]);
  });

  it('times out one object (destroy-graph.timeout) and aborts its signal', async () => {
    const g = new ObjectGraph();
    let aborted = false;
    g.add({
      id: 'slow',
      type: 'T',
      destroy: (_o, { signal }) =>
        new Promise<void>((resolve) => {
          signal.addEventListener('abort', () => {
            aborted = true;
            resolve();
          });
        }),
    });
    g.add({ id: 'fast', type: 'T' });
    const report = await g.gc({ timeoutMs: 30, policy: 'continue' });
    expect(report.destroyed).toEqual(['fast']);
    expect(report.failed).toMatchObject([
      { id: 'slow', timedOut: true, error: { code: 'destroy-graph.timeout' } },
    ]);
    expect(aborted).toBe(true);
  });

  it('an aborted signal stops the run; it resolves with status aborted and can be resumed', async () => {
    const g = new ObjectGraph();
    const controller = new AbortController();
    const top = g.add({ id: 'top', type: 'T' });
    g.add({
      id: 'first',
      type: 'T',
      owner: top,
      destroy: () => controller.abort(new Error('stop now')),
    });
    const plan = g.plan(g.collect());
    const report = await g.destroy(plan, { signal: controller.signal });
    expect(report.status).toBe('aborted');
    expect(report.pending).toContain('top');
    await expect(g.destroy(plan, { signal: controller.signal })).rejects.toThrow('stop now');
    expect((await g.destroy(plan)).status).toBe('completed');
    expect(g.size).toBe(0);
  });

  it('refuses a second concurrent run (destroy-graph.busy) and bad options (TypeError)', async () => {
    const g = new ObjectGraph();
    const gate = deferred<void>();
    g.add({ id: 'x', type: 'T', destroy: () => gate.promise });
    const plan = g.plan(g.collect());
    await expect(g.destroy(plan, { concurrency: 0 })).rejects.toThrow(
      'destroy: concurrency must be an integer >= 1, got 0',
    );
    await expect(g.destroy(plan, { concurrency: 1.5 })).rejects.toThrow(TypeError);
    await expect(g.destroy(plan, { timeoutMs: -1 })).rejects.toThrow(
      'destroy: timeoutMs must be a number >= 0 (or Infinity), got -1',
    );
    await expect(g.destroy(plan, { timeoutMs: Number.NaN })).rejects.toThrow(TypeError);
    await expect(g.destroy(plan, { policy: 'maybe' as 'stop' })).rejects.toThrow(TypeError);
    // Bad options are refused before anything runs.
    expect(g.isDestroyed(g.get('x')!)).toBe(false);
    const run = g.destroy(plan);
    await expect(g.destroy(plan)).rejects.toSatisfy((e) =>
      DestroyGraphError.hasCode(e, 'destroy-graph.busy'),
    );
    gate.resolve();
    await run;
    expect(() => g.collect({ scope: 'all' as 'complete' })).toThrow(TypeError);
  });

  it('reads durations from the injected clock', async () => {
    const clock = new ManualClock(1_000);
    const g = new ObjectGraph({ clock });
    g.add({ id: 'slow', type: 'T', destroy: () => clock.advance(250) });
    const durations: number[] = [];
    g.events.on('destroy:destroyed', (event) => void durations.push(event.durationMs));
    await g.gc();
    expect(durations).toEqual([250]);
  });

  it('unsubscribing from a dropped publisher does nothing', async () => {
    const g = new ObjectGraph();
    const a = g.add({ id: 'a', type: 'T', root: true });
    const b = g.add({ id: 'b', type: 'T' });
    subscribeDestruction(b, a);
    await g.gc();
    expect(g.has(b)).toBe(false);
    expect(() => g.unsubscribeDestruction(b, a)).not.toThrow();
  });

  it('runs the destroy functions of the whole type chain, most derived first', async () => {
    const log: string[] = [];
    const g = new ObjectGraph({
      types: {
        Base: { destroy: () => void log.push('Base') },
        Derived: { extends: 'Base', destroy: () => void log.push('Derived') },
      },
    });
    g.add({ type: 'Derived', destroy: () => void log.push('own') });
    await g.gc();
    expect(log).toEqual(['Derived', 'Base', 'own']);
  });

  it('a destroy function that re-references another doomed object keeps it, marked destroyed', async () => {
    const g = new ObjectGraph();
    const keeper = g.add({ id: 'keeper', type: 'T', root: true });
    const b = g.add({ id: 'b', type: 'T' });
    g.add({ id: 'a', type: 'T', destroy: () => g.set(keeper, 'saved', b) });
    const report = await g.gc();
    expect(report.resurrected).toEqual(['b']);
    expect(report.dropped).toEqual(['a']);
    expect(g.isDestroyed(b)).toBe(true);
    expect(g.read(keeper, 'saved')).toBe(b);
  });
});

describe('serialization', () => {
  it('keeps the destroyed flag, references, roots, statics and named subscriptions', async () => {
    const types = {
      Holder: { properties: { thing: 'persistent' as const } },
      Thing: { handlers: { onGone: () => {} } },
    };
    const g = new ObjectGraph({ types });
    const holder = g.add({ id: 'holder', type: 'Holder', root: true, value: { name: 'h' } });
    const thing = g.add({ id: 'thing', type: 'Thing', owner: holder, value: { n: 1 } });
    const other = g.add({ id: 'other', type: 'Thing' });
    g.setStatic('Thing', 'default', other);
    subscribeDestruction(holder, thing, 'onGone');
    subscribeDestruction(holder, thing, 'onGone');
    subscribeDestruction(thing, holder, (p) => g.set(holder, 'thing', p)); // resurrects thing
    g.set(holder, 'scratch', [other], { kind: 'runtime' });
    g.set(holder, 'thing', null);
    await g.gc();
    expect(g.isDestroyed(thing)).toBe(true);

    const snapshot = JSON.parse(JSON.stringify(g.serialize())) as ReturnType<
      ObjectGraph['serialize']
    >;
    const copy = ObjectGraph.deserialize(snapshot, { types });
    expect(copy.serialize()).toEqual(snapshot);
    const thing2 = copy.get('thing')!;
    expect(copy.isDestroyed(thing2)).toBe(true);
    expect(copy.guard(thing2 as GraphObject<{ n: number }>).n).toBe(1);
    expect(copy.subscriptionCount(copy.get('holder')!, thing2)).toBe(2);
    expect(thing2.owner?.id).toBe('holder');
    // Unreferenced destroyed objects are dropped, never destroyed again.
    copy.set(copy.get('holder')!, 'thing', null);
    expect(copy.collect()).toEqual([]);
    expect(copy.has('thing')).toBe(false);
  });

  it('rejects invalid snapshots (destroy-graph.invalid_snapshot) and non-JSON values (TypeError)', () => {
    expect(() => ObjectGraph.deserialize({} as never)).toThrow(/invalid graph snapshot/);
    expect(() =>
      ObjectGraph.deserialize({
        format: 'rigging.destroy-graph',
        version: 1,
        objects: [{ id: 'a', type: 'T', owner: 'ghost' }],
        roots: [],
        statics: [],
        subscriptions: [],
      }),
    ).toThrow(DestroyGraphError);
    const g = new ObjectGraph();
    g.add({ type: 'T', value: { f: () => 1 } });
    expect(() => g.serialize()).toThrow(TypeError);
  });

  it('diff finds the objects removed "offline" and they are destroyed from the snapshot', async () => {
    const log: string[] = [];
    const types = { T: { destroy: (o: GraphObject) => void log.push(o.id) } };
    const g = new ObjectGraph({ types });
    const env = g.add({ id: 'env', type: 'T', root: true });
    const app = g.add({ id: 'app', type: 'T', owner: env });
    const db = g.add({ id: 'db', type: 'T', owner: app });
    g.set(env, 'apps', [app], { kind: 'persistent' });
    g.set(app, 'db', db, { kind: 'persistent' });
    const snapshot = g.serialize();
    const incoming = { ...snapshot, objects: snapshot.objects.filter((o) => o.id === 'env') };
    const removed = diff(snapshot, incoming);
    expect(removed).toEqual(['app', 'db']);
    const stored = ObjectGraph.deserialize(snapshot, { types });
    await stored.destroy(stored.plan(removed));
    expect(log).toEqual(['db', 'app']);
  });
});

describe('explain', () => {
  it('says who keeps an object alive and what orders it', () => {
    const g = new ObjectGraph({
      types: { App: { properties: { net: 'persistent', cache: 'runtime' } } },
    });
    const app = g.add({ id: 'app', type: 'App', root: true });
    const net = g.add({ id: 'net', type: 'Network', owner: app });
    const vm = g.add({ id: 'vm', type: 'VM', owner: app });
    const tmp = g.add({ id: 'tmp', type: 'Tmp' });
    g.set(app, 'net', net);
    g.set(app, 'cache', tmp);
    subscribeDestruction(vm, net);
    const e = explain(net);
    expect(e).toMatchObject({
      state: 'live',
      reachable: true,
      persistentlyReachable: true,
      path: ['app', 'net'],
      referencedBy: [{ id: 'app', property: 'net', kind: 'persistent' }],
      after: [{ id: 'vm', reason: 'depends on' }],
      before: [{ id: 'app', reason: 'owned by' }],
      collectedBy: [],
    });
    expect(e.text).toContain('kept alive by app -> net');
    expect(explain(tmp).collectedBy).toEqual(['persistent']);
    expect(explain(vm).collectedBy).toEqual(['persistent', 'complete']);
    expect(explain(vm).text).toContain('unreachable');
  });
});
