import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

it('examples/wait-with-timeout.ts runs and prints what the README says', async () => {
  const child = spawnNode(
    fileURLToPath(new URL('../examples/wait-with-timeout.ts', import.meta.url)),
  );
  expect(await child.exited).toBe(0);
  expect(child.lines[0]).toMatch(/^waited for fast: \d+ ms$/);
  expect(child.lines[1]).toBe('demo.timeout: gave up waiting for slow');
});
