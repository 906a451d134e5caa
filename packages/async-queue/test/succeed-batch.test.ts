// Successes recorded in batches (src/sql/succeed-batch.ts): those that arrive together make few
// statements, shared between two where the dialect splits batches (MySQL).
import { describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import type { Claim, Completion } from '../src/backend.js';
import { SucceedBatcher } from '../src/sql/succeed-batch.js';
import type { SucceedItem } from '../src/sql/types.js';

const claim = (i: number): Claim => ({
  op: {
    id: `op${i}`,
    key: `k${i}`,
    type: 't',
    payload: null,
    status: 'running',
    attempts: 1,
    createdAt: 0,
    startedAt: 0,
    finishedAt: undefined,
    result: undefined,
    error: undefined,
    cancelledBy: undefined,
    idempotencyKey: undefined,
  },
  token: 1,
  announce: false,
});

/**
 * A batcher whose batches are held until `release`; `sizes` lists each batch's size, `texts`
 * the results as each batch stores them.
 */
function recording(splitBatches: boolean) {
  const sizes: number[] = [];
  const texts: string[] = [];
  const gate = deferred<void>();
  const batcher = new SucceedBatcher(
    async (items: SucceedItem[]) => {
      sizes.push(items.length);
      texts.push(...items.map((it) => it.text));
      await gate.promise;
      return items.map((it) => ({ op: it.claim.op, cancelled: [], blocked: false }) as Completion);
    },
    { splitBatches },
  );
  return { sizes, texts, batcher, release: () => gate.resolve() };
}

describe('SucceedBatcher', () => {
  it('shares successes that arrive together between two statements', async () => {
    const { sizes, batcher, release } = recording(true);
    const done = Array.from({ length: 16 }, (_, i) => batcher.add(claim(i), i, undefined));
    await new Promise((r) => setImmediate(r));
    expect(sizes).toEqual([8, 8]);
    release();
    const out = await Promise.all(done);
    expect(out.map((c) => c?.op.id)).toEqual(done.map((_, i) => `op${i}`));
  });

  it('gives the first statement the odd one, and at most 64 to each', async () => {
    for (const [n, sizes] of [
      [9, [5, 4]],
      [150, [64, 64]],
    ] as const) {
      const rec = recording(true);
      const done = Array.from({ length: n }, (_, i) => rec.batcher.add(claim(i), i, undefined));
      await new Promise((r) => setImmediate(r));
      expect(rec.sizes).toEqual(sizes);
      rec.release();
      // Those left waiting (22 of 150) go once a batch is recorded.
      expect((await Promise.all(done)).length).toBe(n);
      expect(rec.sizes.reduce((x, y) => x + y, 0)).toBe(n);
    }
  });

  it('keeps a few successes in one statement', async () => {
    const { sizes, batcher, release } = recording(true);
    const done = Array.from({ length: 3 }, (_, i) => batcher.add(claim(i), i, undefined));
    await new Promise((r) => setImmediate(r));
    expect(sizes).toEqual([3]);
    release();
    await Promise.all(done);
  });

  it('stores each result as JSON, none as null', async () => {
    const { texts, batcher, release } = recording(true);
    const done = [
      batcher.add(claim(0), { a: 1 }, undefined),
      batcher.add(claim(1), undefined, undefined),
    ];
    release();
    await Promise.all(done);
    expect(texts).toEqual(['{"a":1}', 'null']);
  });

  it('rejects every success of a batch that could not be recorded', async () => {
    const failure = new Error('connection lost');
    const batcher = new SucceedBatcher(() => Promise.reject(failure), { splitBatches: true });
    const done = Array.from({ length: 3 }, (_, i) => batcher.add(claim(i), i, undefined));
    for (const d of done) await expect(d).rejects.toBe(failure);
  });

  it('records them in one statement where batches are not split (PostgreSQL, SQLite)', async () => {
    const { sizes, batcher, release } = recording(false);
    const done = Array.from({ length: 16 }, (_, i) => batcher.add(claim(i), i, undefined));
    await new Promise((r) => setImmediate(r));
    expect(sizes).toEqual([16]);
    // Those that arrive while it is recorded go together in the second batch.
    done.push(...Array.from({ length: 5 }, (_, i) => batcher.add(claim(16 + i), i, undefined)));
    await new Promise((r) => setImmediate(r));
    expect(sizes).toEqual([16, 5]);
    release();
    expect((await Promise.all(done)).every((c) => c !== undefined)).toBe(true);
  });
});
