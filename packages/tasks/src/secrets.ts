import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Json } from '@rigging/core';

/** What a redacted value is stored (and, after a restart, read back) as. */
export const REDACTED = '[redacted]';

/** Encrypts or redacts a JSON value for the log. */
export function protect(value: unknown, key: Uint8Array | undefined): Json {
  if (!key) return { $redacted: true };
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const data = Buffer.concat([
    cipher.update(JSON.stringify(value) ?? 'null', 'utf8'),
    cipher.final(),
  ]);
  const tag = cipher.getAuthTag();
  return { $enc: 'aes-256-gcm', v: Buffer.concat([iv, tag, data]).toString('base64') };
}

/** `true` when a stored value is protected (redacted or encrypted). */
export function isProtected(stored: unknown): boolean {
  return (
    typeof stored === 'object' && stored !== null && ('$redacted' in stored || '$enc' in stored)
  );
}

/** Reads back a protected value: decrypted with `key`, or `undefined` when redacted / no key. */
export function reveal(
  stored: Json | undefined,
  key: Uint8Array | undefined,
): { ok: true; value: unknown } | { ok: false } {
  if (!isProtected(stored)) return { ok: true, value: stored };
  const s = stored as { $enc?: string; v?: string };
  if (!s.$enc || !key || typeof s.v !== 'string') return { ok: false };
  const buf = Buffer.from(s.v, 'base64');
  const decipher = createDecipheriv('aes-256-gcm', key, buf.subarray(0, 12));
  decipher.setAuthTag(buf.subarray(12, 28));
  const text = Buffer.concat([decipher.update(buf.subarray(28)), decipher.final()]).toString(
    'utf8',
  );
  return { ok: true, value: JSON.parse(text) as unknown };
}

export function checkKey(key: unknown): Uint8Array | undefined {
  if (key === undefined) return undefined;
  if (!(key instanceof Uint8Array) || key.length !== 32) {
    throw new TypeError('secretKey must be a 32-byte Uint8Array/Buffer (AES-256-GCM)');
  }
  return key;
}
