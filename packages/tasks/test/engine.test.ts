import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import {
  Engine,
  FlowFailed,
  alternatives,
  graphFlow,
  link,
  linearFlow,
  memoryLog,
  revertAll,
  task,
  times,
  unorderedFlow,
  type TaskStateEvent,
} from '../src/index.js';
import { recorder } from './helpers.js';

describe('linear flows', () => {
  it('runs tasks in order and returns provided symbols', async () => {
    const a = task({ name: 'a', provides: 'x', execute: () => 2 });
    const b = task({
      name: 'b',
      requires: ['x', 'y'],
      provides: 'z',
      execute: (_ctx, { x, y }: { x: number; y: number }) => x * y,
    });
    const out = await new Engine().run(linearFlow('f', a, b), { inputs: { y: 21 } });
    expect(out).toEqual({ x: 2, z: 42 });
  });

  it('reverts completed tasks in exact reverse order with their results and the failure', async () => {
    const { events, make } = recorder();
    const flow = linearFlow(
      'deploy',
      make('a'),
      make('b'),
      make('c'),
      make('d', { fail: true }),
      make('e'),
    );
    const err = await new Engine().run(flow, { inputs: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FlowFailed);
    expect((err as FlowFailed).code).toBe('tasks.flow_failed');
    expect((err as FlowFailed).failures[0]).toMatchObject({ task: 'd', message: 'd broke' });
    expect((err as FlowFailed).reverts.map((r) => `${r.task}:${r.state}`)).toEqual([
      'c:REVERTED',
      'b:REVERTED',
      'a:REVERTED',
    ]);
    expect(events).toEqual([
      'exec a',
      'exec b',
      'exec c',
      'fail d',
      'revert c',
      'revert b',
      'revert a',
    ]);
  });

  it('stops at a failed revert, or continues in tolerant mode', async () => {
    const r1 = recorder();
    const f1 = linearFlow(
      'f',
      r1.make('a'),
      r1.make('b', { revertFails: true }),
      r1.make('c'),
      r1.make('d', { fail: true }),
    );
    const e1 = (await new Engine().run(f1, { inputs: {} }).catch((e: unknown) => e)) as FlowFailed;
    expect(e1.code).toBe('tasks.revert_failed');
    expect(r1.events.slice(-2)).toEqual(['revert c', 'revert b']);
    expect(e1.reverts.map((r) => `${r.task}:${r.state}`)).toEqual([
      'c:REVERTED',
      'b:REVERT_FAILURE',
      'a:PENDING',
    ]);

    const r2 = recorder();
    const f2 = linearFlow(
      'f',
      r2.make('a'),
      r2.make('b', { revertFails: true }),
      r2.make('c'),
      r2.make('d', { fail: true }),
    );
    const log = memoryLog();
    const e2 = (await new Engine({ onRevertFailure: 'tolerant', log })
      .run(f2, { inputs: {}, flowId: 'x' })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(e2.code).toBe('tasks.revert_failed');
    expect(r2.events.slice(-3)).toEqual(['revert c', 'revert b', 'revert a']);
    expect((await log.load('x'))!.record.state).toBe('REVERT_FAILURE');
  });

  it('rejects non-JSON results with tasks.result_not_serializable and reverts', async () => {
    const { events, make } = recorder();
    const bad = task({ name: 'bad', execute: () => new Map() });
    const err = (await new Engine()
      .run(linearFlow('f', make('a'), bad), { inputs: {} })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(err.failures[0]?.code).toBe('tasks.result_not_serializable');
    expect(events).toEqual(['exec a', 'revert a']);
  });
});

describe('unordered and graph flows', () => {
  it('reverts parallel branches in reverse topological order', async () => {
    const { events, make } = recorder();
    const flow = linearFlow(
      'f',
      make('start'),
      unorderedFlow(
        'par',
        make('p1', { delayMs: 5 }),
        make('p2', { delayMs: 1 }),
        make('p3', { delayMs: 3 }),
      ),
      make('boom', { fail: true }),
    );
    const engine = new Engine({ concurrency: 4 });
    await expect(engine.run(flow, { inputs: {} })).rejects.toThrow(FlowFailed);
    const exec = events.filter((e) => e.startsWith('exec ')).map((e) => e.slice(5));
    const rev = events.filter((e) => e.startsWith('revert ')).map((e) => e.slice(7));
    expect(exec[0]).toBe('start');
    expect(rev[rev.length - 1]).toBe('start');
    expect(new Set(rev)).toEqual(new Set(exec));
    // With concurrency 1 the revert order is exactly the reverse completion order.
    const r = recorder();
    const flow1 = linearFlow(
      'g',
      r.make('s'),
      unorderedFlow('u', r.make('u1'), r.make('u2')),
      r.make('x', { fail: true }),
    );
    await expect(new Engine().run(flow1, { inputs: {} })).rejects.toThrow(FlowFailed);
    expect(r.events).toEqual([
      'exec s',
      'exec u1',
      'exec u2',
      'fail x',
      'revert u2',
      'revert u1',
      'revert s',
    ]);
  });

  it('infers graph edges from requires/provides and honours link()', async () => {
    const order: string[] = [];
    const t = (name: string, requires: string[], provides?: string) =>
      task({
        name,
        requires,
        provides,
        execute: () => {
          order.push(name);
          return name;
        },
      });
    const c = t('c', ['a', 'b'], 'c');
    const a = t('a', [], 'a');
    const b = t('b', ['a'], 'b');
    const z = t('z', []);
    const flow = graphFlow('g', c, b, z, a, link(c, z));
    const out = await new Engine().run(flow, { inputs: {} });
    expect(out).toEqual({ a: 'a', b: 'b', c: 'c' });
    expect(order).toEqual(['a', 'b', 'c', 'z']);
  });

  it('runs nested flows of every kind', async () => {
    const { events, make } = recorder();
    const flow = linearFlow(
      'outer',
      make('a'),
      graphFlow('g', make('g1', { provides: 'g1' }), make('g2', { requires: ['g1'] })),
      unorderedFlow('u', linearFlow('l', make('l1'), make('l2')), make('u2')),
      make('last', { fail: true }),
    );
    await expect(new Engine({ concurrency: 3 }).run(flow, { inputs: {} })).rejects.toThrow(
      FlowFailed,
    );
    expect(events.indexOf('exec g1')).toBeLessThan(events.indexOf('exec g2'));
    expect(events.indexOf('exec l1')).toBeLessThan(events.indexOf('exec l2'));
    expect(events.indexOf('revert l2')).toBeLessThan(events.indexOf('revert l1'));
    expect(events.indexOf('revert g2')).toBeLessThan(events.indexOf('revert g1'));
    expect(events[events.length - 1]).toBe('revert a');
  });
});

describe('validation', () => {
  const noop = (name: string, requires: string[] = [], provides?: string) =>
    task({ name, requires, provides, execute: () => null });
  const code = async (fn: () => unknown) => {
    try {
      await fn();
    } catch (e) {
      return {
        code: (e as RiggingError).code,
        message: (e as Error).message,
        details: (e as RiggingError).details,
      };
    }
    return undefined;
  };

  it('names duplicate tasks', async () => {
    const r = await code(() => linearFlow('f', noop('a'), unorderedFlow('u', noop('a'))));
    expect(r?.code).toBe('tasks.invalid_flow');
    expect(r?.message).toContain("'a'");
  });

  it('names two providers of one symbol', async () => {
    const r = await code(() =>
      new Engine().run(linearFlow('f', noop('a', [], 'x'), noop('b', [], 'x')), { inputs: {} }),
    );
    expect(r?.code).toBe('tasks.invalid_flow');
    expect(r?.message).toContain("'x' is provided by both 'a' and 'b'");
  });

  it('names missing inputs and the tasks needing them', async () => {
    const r = await code(() =>
      new Engine().run(linearFlow('f', noop('a', ['host'])), { inputs: {} }),
    );
    expect(r?.code).toBe('tasks.invalid_flow');
    expect(r?.message).toContain("'host' (required by 'a')");
  });

  it('names the tasks of a cycle', async () => {
    const flow = graphFlow('g', noop('a', ['y'], 'x'), noop('b', ['x'], 'y'), noop('c'));
    const r = await code(() => new Engine().run(flow, { inputs: {} }));
    expect(r?.code).toBe('tasks.invalid_flow');
    expect(r?.message).toMatch(/cycle among 'a', 'b'$/);
    // A linear order contradicting the data flow is a cycle too.
    const r2 = await code(() =>
      new Engine().run(linearFlow('l', noop('b', ['x']), noop('a', [], 'x')), { inputs: {} }),
    );
    expect(r2?.message).toContain('cycle');
  });

  it('rejects links to tasks outside the flow and bad options', async () => {
    const r = await code(() =>
      new Engine().run(graphFlow('g', noop('a'), link('a', 'nope')), { inputs: {} }),
    );
    expect(r?.message).toContain("'nope'");
    expect(() => new Engine({ concurrency: 0 })).toThrow(
      'Engine: concurrency must be an integer >= 1, got 0',
    );
    expect(() => new Engine({ concurrency: 1.5 })).toThrow(TypeError);
    expect(() => task({ name: '', execute: () => 1 })).toThrow(TypeError);
    expect(() => times(-1)).toThrow('times: n must be an integer >= 0, got -1');
    expect(() => times(undefined as unknown as number)).toThrow(TypeError);
    expect(() => times(1, -5)).toThrow(TypeError);
    expect(() => times(1, { factor: 0.5 })).toThrow('backoff.factor must be >= 1');
    expect(() => alternatives([{}], { backoff: { jitter: 2 } })).toThrow(TypeError);
    await expect(new Engine().flows({ limit: -1 })).rejects.toThrow(
      'flows: limit must be an integer >= 0, got -1',
    );
  });

  it('takes the backoff shapes of core: a number, a function, exponential settings', () => {
    const delays = (controller: ReturnType<typeof times>) =>
      [1, 2, 3].map((attempt) => {
        const decision = controller.onFailure({ task: 't', attempt, error: new Error('x') });
        return decision.action === 'retry' ? decision.delayMs : undefined;
      });
    expect(delays(times(3, 7))).toEqual([7, 7, 7]);
    expect(delays(times(3, (retry) => retry * 10))).toEqual([10, 20, 30]);
    expect(delays(times(3, { initialMs: 50, factor: 3, maxMs: 200 }))).toEqual([50, 150, 200]);
    expect(delays(times(2))).toEqual([0, 0, undefined]);
  });
});

describe('events', () => {
  it('emits every transition in order', async () => {
    const { make } = recorder();
    const engine = new Engine();
    const seen: string[] = [];
    engine.on('task:state', (e: TaskStateEvent) => seen.push(`${e.task}:${e.state}`));
    engine.on('flow:state', (e) => seen.push(`flow:${e.state}`));
    await engine
      .run(linearFlow('f', make('a'), make('b', { fail: true })), { inputs: {}, flowId: 'f1' })
      .catch(() => {});
    expect(seen).toEqual([
      'flow:RUNNING',
      'a:RUNNING',
      'a:SUCCESS',
      'b:RUNNING',
      'b:FAILURE',
      'flow:REVERTING',
      'a:REVERTING',
      'a:REVERTED',
      'flow:REVERTED',
    ]);
    const history = await engine.history('f1');
    expect(history.map((h) => `${h.task ?? 'flow'}:${h.state}`)).toEqual(seen);
    expect(history.map((h) => h.seq)).toEqual(seen.map((_, i) => i + 1));
  });
});

describe('retry controllers', () => {
  it('times(n, backoff) retries then succeeds, or reverts once exhausted', async () => {
    let calls = 0;
    const flaky = task({
      name: 'flaky',
      retry: times(2, 1),
      execute: (ctx) => {
        calls++;
        if (ctx.attempt < 3) throw new Error(`attempt ${ctx.attempt}`);
        return ctx.attempt;
      },
      provides: 'n',
    });
    const engine = new Engine();
    const states: string[] = [];
    engine.on('task:state', (e) => states.push(e.state));
    expect(await engine.run(flaky, { inputs: {} })).toEqual({ n: 3 });
    expect(calls).toBe(3);
    expect(states).toEqual(['RUNNING', 'RETRYING', 'RUNNING', 'RETRYING', 'RUNNING', 'SUCCESS']);

    const { events, make } = recorder();
    const never = task({
      name: 'never',
      retry: times(1),
      execute: () => Promise.reject(new Error('no')),
    });
    await expect(
      new Engine().run(linearFlow('f', make('a'), never), { inputs: {} }),
    ).rejects.toThrow(FlowFailed);
    expect(events).toEqual(['exec a', 'revert a']);
  });

  it('alternatives() tries each parameter set in turn', async () => {
    const tried: unknown[] = [];
    const pick = task({
      name: 'pick',
      requires: ['zone'],
      retry: alternatives([{ zone: 'a' }, { zone: 'b' }, { zone: 'c' }]),
      provides: 'zone_used',
      execute: (ctx, { zone }: { zone: string }) => {
        tried.push([zone, ctx.params]);
        if (zone !== 'b') throw new Error(`zone ${zone} full`);
        return zone;
      },
    });
    expect(await new Engine().run(pick, { inputs: { zone: 'default' } })).toEqual({
      zone_used: 'b',
    });
    expect(tried).toEqual([
      ['a', { zone: 'a' }],
      ['b', { zone: 'b' }],
    ]);
  });

  it('revertAll never retries', async () => {
    let calls = 0;
    const t = task({
      name: 't',
      retry: revertAll,
      execute: () => {
        calls++;
        throw new Error('x');
      },
    });
    await expect(new Engine().run(t, { inputs: {} })).rejects.toThrow(FlowFailed);
    expect(calls).toBe(1);
  });
});

describe('cancellation and suspension', () => {
  it('cancels running tasks through ctx.signal, then reverts', async () => {
    const { events, make } = recorder();
    const ac = new AbortController();
    const slow = task({
      name: 'slow',
      execute: (ctx) =>
        new Promise((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
          setTimeout(() => ac.abort(new Error('user cancelled')), 1);
        }),
    });
    const err = (await new Engine()
      .run(linearFlow('f', make('a'), slow, make('never')), { inputs: {}, signal: ac.signal })
      .catch((e: unknown) => e)) as FlowFailed;
    expect(err.code).toBe('tasks.cancelled');
    expect(events).toEqual(['exec a', 'revert a']);
  });

  it('suspend() stops at the next boundary and resume() continues', async () => {
    const { events, make } = recorder();
    const engine = new Engine();
    let suspended: Promise<boolean> | undefined;
    const pause = task({
      name: 'pause',
      execute: () => {
        suspended = engine.suspend('s1');
        return 1;
      },
    });
    const flow = linearFlow('f', make('a'), pause, make('b'));
    const err = await engine.run(flow, { inputs: {}, flowId: 's1' }).catch((e: unknown) => e);
    expect(RiggingError.hasCode(err, 'tasks.suspended')).toBe(true);
    expect(await suspended).toBe(true);
    expect(events).toEqual(['exec a']);
    expect((await engine.flows({ states: ['SUSPENDED'] })).map((f) => f.flowId)).toEqual(['s1']);
    await engine.resume('s1', flow);
    expect(events).toEqual(['exec a', 'exec b']);
    expect(await engine.flows({ states: ['SUCCESS'] })).toHaveLength(1);
  });
});

describe('flow-level retry', () => {
  it('times(n) on a subflow reverts it and runs it again; the rest of the flow is untouched', async () => {
    const events: string[] = [];
    let failures = 2;
    const t = (name: string, fail = false) =>
      task({
        name,
        execute: () => {
          if (fail && failures-- > 0) {
            events.push(`fail ${name}`);
            throw new Error(`${name} broke`);
          }
          events.push(`exec ${name}`);
          return name;
        },
        revert: (_ctx, { failure }) => {
          events.push(`revert ${name} (${failure?.task})`);
        },
      });
    const flow = linearFlow(
      'outer',
      t('a'),
      linearFlow({ name: 'inner', retry: times(2) }, t('b'), t('c'), t('d', true)),
      t('e'),
    );
    const engine = new Engine();
    const states: string[] = [];
    engine.on('task:state', (e) => e.task === 'b' && states.push(e.state));
    await engine.run(flow, { inputs: {} });
    expect(events).toEqual([
      'exec a',
      'exec b',
      'exec c',
      'fail d',
      'revert c (d)',
      'revert b (d)',
      'exec b',
      'exec c',
      'fail d',
      'revert c (d)',
      'revert b (d)',
      'exec b',
      'exec c',
      'exec d',
      'exec e',
    ]);
    expect(states.slice(0, 6)).toEqual([
      'RUNNING',
      'SUCCESS',
      'REVERTING',
      'REVERTED',
      'PENDING',
      'RUNNING',
    ]);
  });

  it('escalates to the whole flow once exhausted, and revertAll on a task skips flow retries', async () => {
    const { events, make } = recorder();
    const flow = linearFlow(
      'outer',
      make('a'),
      linearFlow({ name: 'inner', retry: times(1) }, make('b'), make('c', { fail: true })),
    );
    await expect(new Engine().run(flow, { inputs: {} })).rejects.toThrow(FlowFailed);
    expect(events).toEqual([
      'exec a',
      'exec b',
      'fail c',
      'revert b',
      'exec b',
      'fail c',
      'revert b',
      'revert a',
    ]);

    const r = recorder();
    const hard = task({
      name: 'hard',
      retry: revertAll,
      execute: () => Promise.reject(new Error('fatal')),
    });
    const flow2 = linearFlow(
      'outer',
      r.make('a'),
      linearFlow({ name: 'inner', retry: times(3) }, r.make('b'), hard),
    );
    await expect(new Engine().run(flow2, { inputs: {} })).rejects.toThrow(FlowFailed);
    expect(r.events).toEqual(['exec a', 'exec b', 'revert b', 'revert a']);
  });

  it('alternatives on a sub-flow gives each attempt its parameter set; attempts are in the log', async () => {
    const seen: string[] = [];
    const step = (name: string, fails = false) =>
      task({
        name,
        requires: ['zone'],
        execute: (ctx, { zone }: { zone: string }) => {
          seen.push(`exec ${name} ${zone} ${String(ctx.params?.zone)}`);
          if (fails && zone !== 'z3') throw new Error(`${name} fails in ${zone}`);
          return zone;
        },
        revert: (_ctx, { inputs }) => {
          seen.push(`revert ${name} ${String(inputs.zone)}`);
        },
      });
    const flow = linearFlow(
      { name: 'inner', retry: alternatives([{ zone: 'z1' }, { zone: 'z2' }, { zone: 'z3' }]) },
      step('b'),
      step('c', true),
    );
    const engine = new Engine();
    await engine.run(flow, { inputs: { zone: 'none' }, flowId: 'alt' });
    expect(seen).toEqual([
      'exec b z1 z1',
      'exec c z1 z1',
      'revert b z1',
      'exec b z2 z2',
      'exec c z2 z2',
      'revert b z2',
      'exec b z3 z3',
      'exec c z3 z3',
    ]);
    const subflow = (await engine.history('alt')).filter((e) => e.subflow);
    expect(subflow.map((e) => `${e.task} ${e.state} ${e.attempt}`)).toEqual([
      'inner RETRYING 1',
      'inner RUNNING 2',
      'inner RETRYING 2',
      'inner RUNNING 3',
    ]);
  });

  it("each attempt of a flow gives its tasks a fresh attempt count (a task's own controller restarts)", async () => {
    const attempts: number[] = [];
    const flaky = task({
      name: 'c',
      retry: times(1),
      execute: (ctx) => {
        attempts.push(ctx.attempt);
        throw new Error('still broken');
      },
    });
    const flow = linearFlow({ name: 'inner', retry: times(1) }, flaky);
    const engine = new Engine();
    await expect(engine.run(flow, { inputs: {}, flowId: 'fresh' })).rejects.toThrow(FlowFailed);
    expect(attempts).toEqual([1, 2, 1, 2]);
    const pending = (await engine.history('fresh')).filter((e) => e.state === 'PENDING');
    expect(pending.map((e) => [e.task, e.attempt])).toEqual([['c', 0]]);
  });
});
