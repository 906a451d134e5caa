import { fileURLToPath } from 'node:url';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

const example = fileURLToPath(new URL('../examples/queue-flow.ts', import.meta.url));

it('examples/queue-flow.ts: a shutdown gives the op back and the next delivery resumes; a real failure fails it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-example-'));
  try {
    for (const args of [[], [`sqlite:${join(dir, 'log.db')}`]]) {
      const child = spawnNode(example, args);
      expect(await child.exited, child.stderr()).toBe(0);
      const lines = child.lines;
      expect(lines.filter((l) => l.includes('create-volume for acme'))).toHaveLength(1);
      expect(lines.filter((l) => l.includes('start-server on vol-acme'))).toHaveLength(1);
      expect(
        lines.some((l) => l.startsWith('op op-acme: given back') && l.includes('suspended')),
      ).toBe(true);
      expect(lines.some((l) => l.startsWith('op op-acme: succeeded'))).toBe(true);
      expect(lines.some((l) => l.includes('revert create-volume: deleting vol-acme'))).toBe(false);
      expect(lines).toContain('  revert create-volume: deleting vol-broken');
      expect(lines).toContain('op op-broken: failed (tasks.flow_failed)');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
