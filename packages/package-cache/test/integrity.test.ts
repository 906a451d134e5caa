import { createHash, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { PackageCache } from '../src/index.js';
import { IntegrityHasher, parseIntegrity, verifyBuffer } from '../src/integrity.js';
import { tempDir } from './helpers.js';

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

describe('parseIntegrity (which tokens of an SRI string count)', () => {
  const bytes = Buffer.from('package 0'); // its SHA-512 in base64 has both "+" and "/"
  const s512 = sri('sha512', bytes);
  const d512 = s512.slice('sha512-'.length);

  it('takes tokens split by any whitespace, with an option suffix after "?"', async () => {
    for (const value of [
      `  ${s512}\n`,
      `\t${s512}?foo=bar`,
      `${s512}?`,
      `${s512}?a?b ${sri('sha256', bytes)}`,
      `sha1-abc\n\n  ${s512}`,
    ]) {
      expect(parseIntegrity(value), value).toEqual({ algorithm: 'sha512', digests: [d512] });
      await expect(verifyBuffer(bytes, value, 'x')).resolves.toBe(s512);
    }
  });

  it('accepts base64url digests, padded or not, as their base64 twins', async () => {
    expect(d512).toMatch(/\+.*\/|\/.*\+/);
    const url = d512.replace(/\+/g, '-').replace(/\//g, '_');
    for (const digest of [url, url.replace(/=+$/, '')]) {
      expect(parseIntegrity(`sha512-${digest}`).digests).toEqual([d512]);
      await expect(verifyBuffer(bytes, `sha512-${digest}`, 'x')).resolves.toBe(s512);
    }
    // the same for SHA-256, whose digest ends in one "="
    const s256 = sri('sha256', bytes);
    expect(s256).toMatch(/[^=]=$/);
    await expect(verifyBuffer(bytes, s256.slice(0, -1), 'x', 'sha512')).resolves.toBe(s256);
  });

  it('ignores a token that is not exactly <algorithm>-<base64>[?options]', async () => {
    const good256 = sri('sha256', bytes);
    const bad512 = sri('sha512', Buffer.from('what an attacker serves')).slice('sha512-'.length);
    // none of these is a sha512 token, so the sha256 one decides and the bytes pass
    for (const junk of [
      `xsha512-${bad512}`,
      `sha512-${bad512}!`,
      `sha512-${bad512}#x`,
      `SHA512-${bad512}`,
      `sha512_${bad512}`,
      `sha512-`,
    ]) {
      const value = `${good256} ${junk}`;
      expect(parseIntegrity(value).algorithm, value).toBe('sha256');
      await expect(verifyBuffer(bytes, value, 'x')).resolves.toBe(good256);
      // alone, nothing is usable: a TypeError naming the value
      expect(() => parseIntegrity(junk)).toThrow(TypeError);
      expect(() => parseIntegrity(junk)).toThrow(JSON.stringify(junk));
    }
    for (const value of ['', '   ', 'md5-abc', 'sha1-abc sha224-abc']) {
      expect(() => parseIntegrity(value)).toThrow(
        `integrity must be an SRI string such as "sha512-<base64>", got ${JSON.stringify(value)}`,
      );
    }
  });
});

describe('integrity mismatch and the hashing options', () => {
  const good = Buffer.from('the real package');
  const bad = Buffer.from('what an attacker serves');

  it('accepts any digest of the strongest algorithm, and names them all when none matches', async () => {
    const other = sri('sha512', Buffer.from('another build'));
    await expect(verifyBuffer(good, `${other} ${sri('sha512', good)}`, 'x')).resolves.toBe(
      sri('sha512', good),
    );
    const expected = `${sri('sha512', bad)} ${sri('sha256', good)} ${other}`;
    const e = await verifyBuffer(good, expected, 'pkg 1.0').catch((x: unknown) => x);
    expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
    expect((e as RiggingError).message).toBe(
      `integrity mismatch for pkg 1.0: expected ${sri('sha512', bad)}, got ${sri('sha512', good)}`,
    );
    expect((e as RiggingError).details).toEqual({
      expected: [sri('sha512', bad), other],
      actual: sri('sha512', good),
      bytes: good.byteLength,
    });
  });

  it('hashes with SHA-512 when nothing is expected and no algorithm is given', async () => {
    await expect(verifyBuffer(good, undefined, 'x')).resolves.toBe(sri('sha512', good));
    const hasher = new IntegrityHasher(undefined);
    hasher.update(good);
    expect(hasher.verify('x')).toBe(sri('sha512', good));
  });

  it('a streamed package: the SRI of all its chunks, checked against the expected one', () => {
    const chunks = [good.subarray(0, 3), good.subarray(3, 3), good.subarray(3)];
    for (const [expected, fallback] of [
      [undefined, 'sha384'],
      [sri('sha384', good), 'sha256'],
      [sri('sha384', good), 'none'],
    ] as const) {
      const hasher = new IntegrityHasher(expected, fallback);
      expect(hasher.algorithm).toBe('sha384');
      for (const chunk of chunks) hasher.update(chunk);
      expect(hasher.bytes).toBe(good.byteLength);
      expect(hasher.verify('x')).toBe(sri('sha384', good));
    }
    const wrong = new IntegrityHasher(sri('sha384', bad), 'none');
    for (const chunk of chunks) wrong.update(chunk);
    const e = (() => {
      try {
        return wrong.verify('pkg 2.0');
      } catch (x) {
        return x;
      }
    })();
    expect(RiggingError.hasCode(e, 'package-cache.integrity_mismatch')).toBe(true);
    expect((e as RiggingError).details).toMatchObject({ bytes: good.byteLength });
  });

  it("with 'none' and nothing expected: counts the bytes, records no integrity", () => {
    const hasher = new IntegrityHasher(undefined, 'none');
    expect(hasher.algorithm).toBe('none');
    hasher.update(good);
    hasher.update(bad);
    expect(hasher.bytes).toBe(good.byteLength + bad.byteLength);
    expect(hasher.verify('x')).toBeUndefined();
  });

  it('the integrityAlgorithm option takes exactly sha256, sha384, sha512 or none', async () => {
    const root = await tempDir();
    const fetch = () => Promise.resolve(good);
    for (const integrityAlgorithm of ['sha256', 'sha384', 'sha512', 'none'] as const) {
      const cache = new PackageCache({ root, fetch, integrityAlgorithm });
      await cache.close();
    }
    for (const integrityAlgorithm of ['md5', 'SHA512', 'sha1', '', 'toString', ['sha256'], 512]) {
      expect(
        // @ts-expect-error: not an algorithm
        () => new PackageCache({ root, fetch, integrityAlgorithm }),
        String(integrityAlgorithm),
      ).toThrow(TypeError);
    }
  });
});
