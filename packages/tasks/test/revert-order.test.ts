import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Engine, FlowFailed, graphFlow, task, type Task } from '../src/index.js';

/** A random DAG: task i requires the symbols of some tasks before it. */
const dag = fc
  .integer({ min: 1, max: 9 })
  .chain((n) =>
    fc.tuple(
      fc.constant(n),
      fc.array(fc.array(fc.boolean(), { minLength: n, maxLength: n }), {
        minLength: n,
        maxLength: n,
      }),
      fc.array(fc.nat(3), { minLength: n, maxLength: n }),
    ),
  )
  .map(([n, bits, delays]) => ({
    n,
    deps: bits.map((row, i) => row.slice(0, i).flatMap((on, j) => (on ? [j] : []))),
    delays,
  }));

const ticks = async (k: number) => {
  for (let i = 0; i < k; i++) await new Promise((resolve) => setImmediate(resolve));
};

describe('revert order (the order Engine documents)', () => {
  it('reverts a task only after every completed task depending on it was reverted; at concurrency 1, exactly in reverse completion order; never more than `concurrency` at once', async () => {
    await fc.assert(
      fc.asyncProperty(
        dag,
        fc.nat(20),
        fc.integer({ min: 1, max: 4 }),
        async ({ n, deps, delays }, failSeed, concurrency) => {
          const failAt = failSeed % n;
          const completed: number[] = [];
          const started = new Map<number, number>();
          const ended = new Map<number, number>();
          let clock = 0;
          let inFlight = 0;
          let most = 0;
          const tasks = Array.from(
            { length: n },
            (_, i) =>
              task({
                name: `t${i}`,
                requires: deps[i]!.map((j) => `s${j}`),
                provides: `s${i}`,
                execute: async () => {
                  await ticks(delays[i]!);
                  if (i === failAt) throw new Error('boom');
                  completed.push(i);
                  return i;
                },
                revert: async () => {
                  started.set(i, ++clock);
                  most = Math.max(most, ++inFlight);
                  await ticks(delays[(i + 1) % n]!);
                  inFlight--;
                  ended.set(i, ++clock);
                },
              }) as Task,
          );
          const outcome = await new Engine({ concurrency })
            .run(graphFlow('g', ...tasks), { inputs: {} })
            .catch((error: unknown) => error);
          expect(outcome).toBeInstanceOf(FlowFailed);
          expect([...started.keys()].sort()).toEqual([...completed].sort());
          expect(most).toBeLessThanOrEqual(concurrency);
          for (const i of completed)
            for (const j of deps[i]!) expect(ended.get(i)!).toBeLessThan(started.get(j)!);
          if (concurrency === 1) {
            const order = [...started.entries()].sort((a, b) => a[1] - b[1]).map(([i]) => i);
            expect(order).toEqual([...completed].reverse());
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
