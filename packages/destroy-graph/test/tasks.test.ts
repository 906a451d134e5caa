import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { Engine, memoryLog, times } from '@rigging/tasks';
import { spawnNode } from '@rigging/testkit';
import { ObjectGraph, type DestructionPlan, type PlanJSON } from '../src/index.js';
import { teardownFlow } from '../src/tasks.js';

const child = fileURLToPath(new URL('./fixtures/teardown-child.ts', import.meta.url));

/** An application owning networks, each owning VMs; every network outlives its VMs. */
function tenant(
  networks: number,
  vmsPerNetwork: number,
): { graph: ObjectGraph; plan: DestructionPlan } {
  const graph = new ObjectGraph();
  const app = graph.add({ id: 'app', type: 'Application', root: true });
  for (let n = 0; n < networks; n++) {
    const net = graph.add({ id: `net-${n}`, type: 'Network', owner: app });
    for (let v = 0; v < vmsPerNetwork; v++) {
      const vm = graph.add({ id: `vm-${n}-${v}`, type: 'VM', owner: app });
      graph.subscribeDestruction(vm, net);
    }
  }
  graph.removeRoot(app);
  return { graph, plan: graph.planCollection() };
}

/** Fails unless every edge of `plan` has `before` finish (first time) before `after` starts. */
function expectPlanOrder(plan: PlanJSON, order: string[]): void {
  const at = new Map<string, number>();
  order.forEach((id, i) => {
    if (!at.has(id)) at.set(id, i);
  });
  expect(at.size).toBe(plan.objects);
  expect(plan.edges.length).toBeGreaterThan(0);
  for (const edge of plan.edges) {
    if (!edge.satisfied) continue;
    expect(at.get(edge.before)!, `${edge.before} before ${edge.after}`).toBeLessThan(
      at.get(edge.after)!,
    );
  }
}

describe('teardownFlow', () => {
  it('destroys every planned object once, groups in plan order, and notifies in reverse first', async () => {
    const { plan } = tenant(3, 4);
    const json = plan.toJSON();
    const events: string[] = [];
    const engine = new Engine({ log: memoryLog(), concurrency: 4 });
    const flow = teardownFlow(plan, {
      name: 'tenant-teardown',
      notify: (object) => void events.push(`notify ${object.id}`),
      destroy: async (object) => {
        events.push(`start ${object.id}`);
        await new Promise((resolve) => setTimeout(resolve, 1));
        events.push(`done ${object.id}`);
      },
    });
    await engine.run(flow, { inputs: {}, flowId: 'teardown-1' });

    const notified = events.filter((e) => e.startsWith('notify ')).map((e) => e.slice(7));
    const firstStart = events.findIndex((e) => e.startsWith('start '));
    expect(events.slice(0, firstStart).every((e) => e.startsWith('notify '))).toBe(true);
    expect(notified.length).toBe(json.objects);
    // Notifications: the last group first.
    const groupOf = new Map(json.groups.flatMap((g) => g.objects.map((o) => [o.id, g.index])));
    const notifiedGroups = notified.map((id) => groupOf.get(id)!);
    expect(notifiedGroups).toEqual([...notifiedGroups].sort((a, b) => b - a));
    // Destruction: a group starts only when the previous one is done, so every edge holds.
    const done = events.filter((e) => e.startsWith('done ')).map((e) => e.slice(5));
    expect(new Set(done).size).toBe(json.objects);
    for (const [i, group] of json.groups.entries()) {
      if (i === 0) continue;
      const lastOfPrevious = Math.max(
        ...json.groups[i - 1]!.objects.map((o) => events.indexOf(`done ${o.id}`)),
      );
      for (const o of group.objects)
        expect(events.indexOf(`start ${o.id}`)).toBeGreaterThan(lastOfPrevious);
    }
    expectPlanOrder(json, done);
  });

  it('takes the plan as JSON and applies the retry controller to each step', async () => {
    const { plan } = tenant(1, 2);
    const json = JSON.parse(JSON.stringify(plan)) as PlanJSON;
    const attempts = new Map<string, number>();
    const flow = teardownFlow(json, {
      retry: times(2),
      destroy: (object) => {
        const n = (attempts.get(object.id) ?? 0) + 1;
        attempts.set(object.id, n);
        if (object.id === 'net-0' && n < 3) throw new Error('busy');
      },
    });
    await new Engine().run(flow, { inputs: {} });
    expect(attempts.get('net-0')).toBe(3);
    expect([...attempts.keys()].sort()).toEqual(['app', 'net-0', 'vm-0-0', 'vm-0-1']);
  });

  it('refuses a malformed plan and a missing destroy function before building anything', () => {
    const destroy = () => undefined;
    const bad = [
      undefined,
      {},
      { format: 'rigging.destroy-plan', version: 2, groups: [] },
      { format: 'rigging.destroy-plan', version: 1, groups: {} },
      { format: 'rigging.destroy-plan', version: 1, groups: [{ index: 0, objects: [{ id: 1 }] }] },
      {
        format: 'rigging.destroy-plan',
        version: 1,
        groups: [
          { index: 0, objects: [{ id: 'a', type: 't' }] },
          { index: 1, objects: [{ id: 'a', type: 't' }] },
        ],
      },
    ];
    for (const plan of bad) {
      expect(
        () => teardownFlow(plan as unknown as PlanJSON, { destroy }),
        JSON.stringify(plan),
      ).toThrow(expect.objectContaining({ code: 'destroy-graph.invalid_plan' }));
    }
    try {
      teardownFlow(bad[2] as unknown as PlanJSON, { destroy });
    } catch (error) {
      expect(RiggingError.isInstance(error)).toBe(true);
    }
    const { plan } = tenant(1, 1);
    expect(() => teardownFlow(plan, {} as never)).toThrow(TypeError);
    expect(() => teardownFlow(plan, { destroy, notify: 'x' as never })).toThrow(TypeError);
  });

  it('resumes a teardown after SIGKILL without destroying a completed object again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rigging-teardown-'));
    try {
      const { plan } = tenant(4, 5);
      const json = plan.toJSON();
      const planFile = join(dir, 'plan.json');
      const side = join(dir, 'side');
      writeFileSync(planFile, JSON.stringify(json));
      writeFileSync(side, '');
      const url = `sqlite:${join(dir, 'log.db')}`;
      const killAt = 2 + Math.floor(Math.random() * (json.objects - 3));
      const run = async (mode: 'run' | 'resume') => {
        const c = spawnNode(child, [url, 'teardown-crash', mode, planFile, side, String(killAt)]);
        const code = await c.exited;
        if (code !== 0 && code !== 'SIGKILL') throw new Error(`child: ${c.stderr()}`);
        return { code, lines: c.lines };
      };
      expect((await run('run')).code, `killAt=${killAt}`).toBe('SIGKILL');
      const before = readFileSync(side, 'utf8').trim().split('\n');
      expect(before.length).toBe(killAt);
      expect((await run('resume')).lines).toContain('outcome success');

      const order = readFileSync(side, 'utf8')
        .trim()
        .split('\n')
        .map((line) => line.slice(2));
      const counts = new Map<string, number>();
      for (const id of order) counts.set(id, (counts.get(id) ?? 0) + 1);
      expect(counts.size).toBe(json.objects);
      // Only objects whose destroy may have been in flight at the kill run twice: at most the
      // engine's concurrency of them, and at least the one that killed the process.
      const twice = [...counts].filter(([, n]) => n > 1);
      expect(twice.length, `killAt=${killAt}`).toBeGreaterThanOrEqual(1);
      expect(twice.length).toBeLessThanOrEqual(3);
      expect(Math.max(...counts.values())).toBe(2);
      expectPlanOrder(json, order);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
