import fc from 'fast-check';
import { expect, it } from 'vitest';
import { createQueue, memoryBackend, type QueueBackend } from '../src/index.js';
import { conformance } from './conformance.js';

conformance('memory', async () => memoryBackend());

it('memory backend: methods replaced by the user are the ones called', async () => {
  const backend = memoryBackend();
  const calls: string[] = [];
  const { enqueue, succeed } = backend;
  backend.enqueue = (input) => (calls.push('enqueue'), enqueue(input));
  backend.succeed = ((...args: Parameters<QueueBackend['succeed']>) => (
    calls.push('succeed'),
    succeed(...args)
  )) as QueueBackend['succeed'];
  const q = createQueue({ backend, concurrency: 2, handlers: { x: async (n: number) => n + 1 } });
  await q.cast('k', { type: 'x', payload: 1 });
  expect(await q.call('k', { type: 'x', payload: 2 })).toBe(3);
  await q.close();
  expect(calls.filter((c) => c === 'enqueue')).toHaveLength(2);
  expect(calls.filter((c) => c === 'succeed')).toHaveLength(2);
});

it('memory backend: a wrapper spread from it that replaces enqueue sees every op', async () => {
  const inner = memoryBackend();
  const seen: string[] = [];
  const backend: QueueBackend = {
    ...inner,
    enqueue: (input) => (seen.push(input.type), inner.enqueue(input)),
  };
  const q = createQueue({
    backend,
    concurrency: 2,
    handlers: { x: async (n: number) => n + 1, y: async (n: number) => n * 2 },
  });
  const ids = [q.cast('k', { type: 'x', payload: 1 }), q.cast('k', { type: 'y', payload: 2 })];
  await Promise.all(ids);
  expect(await q.call('k', { type: 'y', payload: 5 })).toBe(10);
  await q.close();
  expect(seen).toEqual(['x', 'y', 'y']);
});

it('cast: a refused op rejects the returned promise (nothing thrown at the call)', async () => {
  const q = createQueue({ concurrency: 1, handlers: { x: async () => 1 } });
  const bad = q.cast('k', { type: 'nope' as 'x', payload: undefined });
  const empty = q.cast('', { type: 'x', payload: undefined });
  await expect(bad).rejects.toMatchObject({ code: 'async-queue.unknown_type' });
  await expect(empty).rejects.toThrow(TypeError);
  expect(await q.inspect('k')).toMatchObject({ pending: [], running: undefined });
  await q.close();
});

it('cast/call: ops stored at once or through enqueue keep per-key call order (generated)', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.record({ key: fc.integer({ min: 0, max: 2 }), now: fc.boolean(), call: fc.boolean() }),
        {
          minLength: 1,
          maxLength: 40,
        },
      ),
      fc.integer({ min: 0, max: 40 }),
      async (ops, awaitAfter) => {
        const inner = memoryBackend();
        let i = 0;
        // Declines `enqueueNow` for the ops drawn so (those go through the async `enqueue`).
        const backend: QueueBackend = {
          ...inner,
          enqueueNow: (input) => (ops[i++]!.now ? inner.enqueueNow!(input) : undefined),
        };
        const ran = new Map<number, number[]>();
        const q = createQueue({
          backend,
          concurrency: 3,
          handlers: {
            run: async (p: { key: number; n: number }) => {
              ran.set(p.key, [...(ran.get(p.key) ?? []), p.n]);
              return p.n;
            },
          },
        });
        const pending: Promise<unknown>[] = [];
        for (const [n, op] of ops.entries()) {
          // Some ops are cast before attach resolved, the rest after.
          if (n === awaitAfter) await Promise.all(pending);
          const input = { type: 'run' as const, payload: { key: op.key, n } };
          pending.push(op.call ? q.call(`k${op.key}`, input) : q.cast(`k${op.key}`, input));
        }
        await Promise.all(pending);
        await q.drained();
        await q.close();
        for (let key = 0; key < 3; key++) {
          const expected = [...ops.entries()].filter(([, o]) => o.key === key).map(([n]) => n);
          expect(ran.get(key) ?? []).toEqual(expected);
        }
      },
    ),
    { numRuns: 50 },
  );
});
