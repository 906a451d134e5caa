import { fileURLToPath } from 'node:url';
import { spawnNode } from '@rigging/testkit';
import { expect, it } from 'vitest';

it('examples/notes.ts runs and prints what the README says', { timeout: 30_000 }, async () => {
  const child = spawnNode(fileURLToPath(new URL('../examples/notes.ts', import.meta.url)));
  expect(await child.exited, child.stderr()).toBe(0);
  expect(child.lines).toEqual([
    "migrated 'notes' to version 1 (applied: create notes_note)",
    'sqlite: buy GPUs → reshape them',
  ]);
});
