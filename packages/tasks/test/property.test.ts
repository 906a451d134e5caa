import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  Engine,
  FlowFailed,
  graphFlow,
  linearFlow,
  task,
  unorderedFlow,
  type Flow,
  type Node,
  type Task,
} from '../src/index.js';

type Shape = { leaf: true } | { kind: 'linear' | 'unordered' | 'graph'; children: Shape[] };

const shape: fc.Arbitrary<Shape> = fc.letrec<{ node: Shape }>((tie) => ({
  node: fc.oneof(
    { maxDepth: 3, depthIdentifier: 'flow' },
    fc.constant({ leaf: true as const }),
    fc.record({
      kind: fc.constantFrom('linear' as const, 'unordered' as const, 'graph' as const),
      children: fc.array(tie('node'), { minLength: 1, maxLength: 4 }),
    }),
  ),
})).node;

function build(
  s: Shape,
  failAt: number,
  log: { completed: string[]; reverted: string[] },
): { flow: Flow; size: number } {
  let n = 0;
  let f = 0;
  const make = (x: Shape): Node => {
    if ('leaf' in x) {
      const name = `t${n++}`;
      const fails = n - 1 === failAt;
      return task({
        name,
        execute: async () => {
          await Promise.resolve();
          if (fails) throw new Error(`${name} fails`);
          log.completed.push(name);
          return name;
        },
        revert: (_ctx, { result }) => {
          expect(result).toBe(name);
          log.reverted.push(name);
        },
      }) as Task;
    }
    const children = x.children.map(make);
    const name = `f${f++}`;
    return x.kind === 'linear'
      ? linearFlow(name, ...children)
      : x.kind === 'unordered'
        ? unorderedFlow(name, ...children)
        : graphFlow(name, ...children);
  };
  const root = make(s);
  const flow = root.kind === 'task' ? linearFlow('root', root) : (root as Flow);
  return { flow, size: n };
}

describe('property: rollback mirrors completion', () => {
  it('for random flows and failure points, reverted == completed in reverse completion order', async () => {
    await fc.assert(
      fc.asyncProperty(
        shape,
        fc.nat(40),
        fc.constantFrom(1, 1, 3),
        async (s, failSeed, concurrency) => {
          const log = { completed: [] as string[], reverted: [] as string[] };
          const probe = build(s, -1, { completed: [], reverted: [] });
          const failAt = failSeed % (probe.size + 1); // == size: nothing fails
          const { flow, size } = build(s, failAt, log);
          const outcome = await new Engine({ concurrency }).run(flow, { inputs: {} }).then(
            () => 'ok',
            (e: unknown) => e,
          );
          if (failAt >= size) {
            expect(outcome).toBe('ok');
            expect(log.reverted).toEqual([]);
            expect(log.completed).toHaveLength(size);
            return;
          }
          expect(outcome).toBeInstanceOf(FlowFailed);
          expect(new Set(log.reverted)).toEqual(new Set(log.completed));
          expect(log.reverted).toHaveLength(log.completed.length);
          if (concurrency === 1) expect(log.reverted).toEqual([...log.completed].reverse());
        },
      ),
      { numRuns: 150 },
    );
  });
});
