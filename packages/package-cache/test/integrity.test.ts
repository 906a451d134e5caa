import { createHash, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { parseIntegrity, verifyBuffer } from '../src/integrity.js';

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

describe('parseIntegrity (the strongest algorithm of a multi-hash SRI string is the one checked)', () => {
  const good = Buffer.from('the real package');
  const bad = Buffer.from('what an attacker serves');

  it('keeps only the strongest algorithm, whatever the order of the tokens', () => {
    const s256 = sri('sha256', good);
    const s384 = sri('sha384', good);
    const s512 = sri('sha512', bad);
    for (const value of [`${s512} ${s256}`, `${s256} ${s512}`, `${s256}\t${s384}  ${s512}`]) {
      const parsed = parseIntegrity(value);
      expect(parsed.algorithm).toBe('sha512');
      expect(parsed.digests).toEqual([s512.slice('sha512-'.length)]);
    }
    expect(parseIntegrity(`${s256} ${s384}`)).toEqual({
      algorithm: 'sha384',
      digests: [s384.slice('sha384-'.length)],
    });
    // several digests of the strongest algorithm: any of them is accepted
    const other = sri('sha512', good);
    expect(parseIntegrity(`${s512} ${s256} ${other}`).digests).toHaveLength(2);
  });

  it('refuses sha512-<bad> sha256-<good> (no downgrade to the weaker hash), in either order', async () => {
    for (const value of [
      `${sri('sha512', bad)} ${sri('sha256', good)}`,
      `${sri('sha256', good)} ${sri('sha512', bad)}`,
    ]) {
      const e = await verifyBuffer(good, value, 'pkg 1.0').catch((x: unknown) => x);
      expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
    }
    // and the strongest one alone decides when it matches
    await expect(
      verifyBuffer(good, `${sri('sha512', good)} ${sri('sha256', bad)}`, 'x'),
    ).resolves.toBe(sri('sha512', good));
  });
});
