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
