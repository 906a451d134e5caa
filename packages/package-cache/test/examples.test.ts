import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

describe('examples', () => {
  it('examples/http-cache.ts runs', { timeout: 60_000 }, async () => {
    const child = spawnNode(fileURLToPath(new URL('../examples/http-cache.ts', import.meta.url)));
    const code = await child.exited;
    expect(code, child.stderr()).toBe(0);
    const out = child.lines.join('\n');
    expect(out).toMatch(/downloaded io\.example\.Web \(\d+ bytes, sha512-/);
    expect(out).toContain('same directory: true');
    expect(out).toContain('manifest: FullName: io.example.Web');
    expect(out).toContain('second acquire hit the cache: true');
    expect(out).toContain('"downloads":1');
  });
});
