import { createHash, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { verifyBuffer } from '../src/integrity.js';

const sri = (algorithm: string, bytes: Uint8Array) =>
  `${algorithm}-${createHash(algorithm).update(bytes).digest('base64')}`;
const KiB = 1024;

describe('verifyBuffer (hashes a fetched buffer in slices)', () => {
  it('gives the SRI of the whole buffer at any size, across slice boundaries (property)', async () => {
    const sizes = fc.oneof(
      fc.integer({ min: 0, max: 2048 * KiB }),
      fc.constantFrom(0, 1, 512 * KiB - 1, 512 * KiB, 512 * KiB + 1, 1024 * KiB, 1536 * KiB + 7),
    );
    await fc.assert(
      fc.asyncProperty(sizes, fc.constantFrom('sha256', 'sha384', 'sha512'), async (n, alg) => {
        const bytes = randomBytes(n);
        const algorithm = alg as 'sha256' | 'sha384' | 'sha512';
        await expect(verifyBuffer(bytes, undefined, 'x', algorithm)).resolves.toBe(sri(alg, bytes));
        await expect(verifyBuffer(bytes, sri(alg, bytes), 'x')).resolves.toBe(sri(alg, bytes));
      }),
      { numRuns: 40 },
    );
  });

  it('refuses a buffer whose integrity differs, and skips hashing with none', async () => {
    const bytes = randomBytes(700 * KiB);
    const other = sri('sha512', Buffer.from('other'));
    const e = await verifyBuffer(bytes, other, 'pkg 1.0').catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
    expect((e as Error).message).toContain('pkg 1.0');
    await expect(verifyBuffer(bytes, undefined, 'x', 'none')).resolves.toBeUndefined();
    // 'none' never overrides an integrity the fetcher gave
    await expect(verifyBuffer(bytes, other, 'x', 'none')).rejects.toThrow(/integrity mismatch/);
  });

  it('lets the event loop turn between slices (extraction I/O proceeds while hashing)', async () => {
    const bytes = randomBytes(8 * 1024 * KiB); // 16 slices
    let turns = 0;
    let done = false;
    const spin = () => {
      turns++;
      if (!done) setImmediate(spin);
    };
    setImmediate(spin);
    await verifyBuffer(bytes, undefined, 'x', 'sha512');
    done = true;
    expect(turns).toBeGreaterThanOrEqual(16);
  });
});
