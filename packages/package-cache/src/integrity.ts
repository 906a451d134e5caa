import { createHash, type Hash } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { PackageCacheError } from './errors.js';

const STRENGTH = { sha256: 1, sha384: 2, sha512: 3 } as const;
/** A hash algorithm an SRI string may name. */
export type IntegrityAlgorithm = keyof typeof STRENGTH;

export const isIntegrityAlgorithm = (value: unknown): value is IntegrityAlgorithm =>
  typeof value === 'string' && Object.hasOwn(STRENGTH, value);

/** A parsed SRI string: the strongest algorithm it names and the digests accepted for it. */
export interface ParsedIntegrity {
  algorithm: IntegrityAlgorithm;
  digests: string[];
}

/**
 * Parses an SRI string (`sha512-<base64> sha256-<base64>`, options after `?` ignored; base64url
 * digests, padded or not, are given back in padded base64). Only the strongest supported
 * algorithm is checked, as the SRI spec says. Throws a `TypeError` naming the value when nothing
 * usable is in it.
 */
export function parseIntegrity(value: string): ParsedIntegrity {
  let best: ParsedIntegrity | undefined;
  for (const token of value.trim().split(/\s+/)) {
    const m = /^(sha256|sha384|sha512)-([A-Za-z0-9+/=_-]+)(\?.*)?$/.exec(token);
    if (!m) continue;
    const algorithm = m[1] as IntegrityAlgorithm;
    // base64url (`-`, `_`, usually unpadded) is read as the padded base64 Node's digests are in
    const base64 = m[2]!.replace(/-/g, '+').replace(/_/g, '/');
    const digest = base64.padEnd(Math.ceil(base64.length / 4) * 4, '=');
    if (!best || STRENGTH[algorithm] > STRENGTH[best.algorithm]) {
      best = { algorithm, digests: [digest] };
    } else if (algorithm === best.algorithm) {
      best.digests.push(digest);
    }
  }
  if (!best) {
    throw new TypeError(
      `integrity must be an SRI string such as "sha512-<base64>", got ${JSON.stringify(value)}`,
    );
  }
  return best;
}

/** Bytes hashed between two turns of the event loop by {@link verifyBuffer}. */
const SLICE_BYTES = 512 * 1024;

/**
 * Hashes a whole buffer in place on this thread, a slice per turn of the event loop, so it
 * overlaps with extraction (whose writes run on the libuv pool) without copying the bytes or
 * blocking the loop for more than one slice (about 0.6 ms with SHA-512 here); resolves to the
 * SRI, or rejects with `package-cache.integrity_mismatch`.
 */
export async function verifyBuffer(
  bytes: Uint8Array,
  expected: string | undefined,
  what: string,
  fallback: IntegrityAlgorithm | 'none' = 'sha512',
): Promise<string | undefined> {
  const hasher = new IntegrityHasher(expected, fallback);
  if (hasher.algorithm === 'none') return undefined;
  for (let at = 0; at < bytes.byteLength; at += SLICE_BYTES) {
    await nextTurn(); // the first turn lets the caller start extracting
    hasher.update(bytes.subarray(at, at + SLICE_BYTES));
  }
  return hasher.verify(what);
}

function check(
  expected: ParsedIntegrity | undefined,
  algorithm: IntegrityAlgorithm,
  digest: string,
  bytes: number,
  what: string,
): string {
  const actual = `${algorithm}-${digest}`;
  if (expected && !expected.digests.includes(digest)) {
    throw new PackageCacheError(
      'package-cache.integrity_mismatch',
      `integrity mismatch for ${what}: expected ${expected.algorithm}-${expected.digests[0]}, got ${actual}`,
      {
        details: {
          expected: expected.digests.map((d) => `${expected.algorithm}-${d}`),
          actual,
          bytes,
        },
      },
    );
  }
  return actual;
}

/**
 * Hashes bytes as they pass, for the algorithm an integrity names (else `fallback`; with
 * `'none'` and nothing expected it only counts bytes).
 */
export class IntegrityHasher {
  readonly #expected: ParsedIntegrity | undefined;
  readonly #hash: Hash | undefined;
  readonly algorithm: IntegrityAlgorithm | 'none';
  bytes = 0;

  constructor(expected: string | undefined, fallback: IntegrityAlgorithm | 'none' = 'sha512') {
    this.#expected = expected === undefined ? undefined : parseIntegrity(expected);
    this.algorithm = this.#expected?.algorithm ?? fallback;
    this.#hash = this.algorithm === 'none' ? undefined : createHash(this.algorithm);
  }

  update(chunk: Uint8Array): void {
    this.bytes += chunk.byteLength;
    this.#hash?.update(chunk);
  }

  /**
   * Returns the SRI of what was hashed (`undefined` when not hashing); throws
   * `package-cache.integrity_mismatch` if the expected one differs.
   */
  verify(what: string): string | undefined {
    // (both are set together; the two tests narrow both types)
    if (this.#hash === undefined || this.algorithm === 'none') return undefined;
    return check(this.#expected, this.algorithm, this.#hash.digest('base64'), this.bytes, what);
  }
}
