import { describe, expect, it } from 'vitest';
import { Engine, linearFlow, otelListener, task, timingListener } from '../src/index.js';

describe('listeners', () => {
  it('timingListener measures execute and revert durations', async () => {
    let now = 1000;
    const clock = { now: () => now, sleep: () => Promise.resolve() };
    const engine = new Engine({ clock });
    const timing = timingListener(engine);
    const step = (name: string, ms: number, fail = false) =>
      task({
        name,
        execute: () => {
          now += ms;
          if (fail) throw new Error('no');
          return null;
        },
        revert: () => {
          now += 3;
        },
      });
    await engine
      .run(linearFlow('f', step('a', 10), step('b', 5, true)), { inputs: {}, flowId: 't' })
      .catch(() => {});
    const t = timing.timings('t');
    expect(t.map((x) => x.task)).toEqual(['a', 'b']);
    expect(t[0]).toMatchObject({ executeMs: 10, revertMs: 3, attempts: 1 });
    expect(t[1]).toMatchObject({ executeMs: 5, attempts: 1 });
    timing.off();
    expect(engine.listenerCount()).toBe(0);
  });

  it('otelListener makes a span per flow and per task execution and revert', async () => {
    const spans: { name: string; parent: unknown; status?: number; ended: boolean }[] = [];
    const tracer = {
      startSpan(name: string, _opts: unknown, ctx?: unknown) {
        const s = { name, parent: ctx, status: undefined as number | undefined, ended: false };
        spans.push(s);
        return {
          setAttribute: () => {},
          addEvent: () => {},
          setStatus: (st: { code: number }) => {
            s.status = st.code;
          },
          end: () => {
            s.ended = true;
          },
        };
      },
    };
    const engine = new Engine();
    const off = await otelListener(engine, { tracer });
    const ok = task({ name: 'ok', execute: () => 1, revert: () => {} });
    const bad = task({ name: 'bad', execute: () => Promise.reject(new Error('x')) });
    await engine.run(linearFlow('deploy', ok, bad), { inputs: {} }).catch(() => {});
    expect(spans.map((s) => s.name)).toEqual(['flow deploy', 'task ok', 'task bad', 'revert ok']);
    expect(spans.every((s) => s.ended)).toBe(true);
    expect(spans[0]?.status).toBe(2); // ERROR
    expect(spans[1]?.status).toBe(1); // OK
    expect(spans[1]?.parent).toBeDefined();
    off();
    expect(engine.listenerCount()).toBe(0);
  });
});
