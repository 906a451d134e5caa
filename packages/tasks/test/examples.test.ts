import { fileURLToPath } from 'node:url';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

const example = fileURLToPath(new URL('../examples/deploy.ts', import.meta.url));

it('examples/deploy.ts: the third step fails and the first two roll back, newest first', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-example-'));
  try {
    for (const args of [[], [`sqlite:${join(dir, 'log.db')}`]]) {
      const child = spawnNode(example, args);
      expect(await child.exited, child.stderr()).toBe(0);
      const out = child.lines.join('\n');
      expect(child.lines).toContain('register-dns: RETRYING');
      expect(out).toContain(
        'revert start-server: stopping srv-shop-on-vol-shop because register-dns failed',
      );
      expect(out.indexOf('revert start-server')).toBeLessThan(out.indexOf('revert create-volume'));
      expect(child.lines).toContain('reverted: start-server, create-volume');
      expect(child.lines).toContain('flow deploy: REVERTED');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
