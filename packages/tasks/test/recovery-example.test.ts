import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

const example = fileURLToPath(new URL('../examples/recovery.ts', import.meta.url));

it('examples/recovery.ts: a SIGKILLed worker’s flow is finished by a new engine with no resume call', async () => {
  const child = spawnNode(example, []);
  expect(await child.exited, child.stderr()).toBe(0);
  const lines = child.lines;
  expect(lines).toContain('worker 1 ended by SIGKILL');
  expect(lines).toContain('recovery: nightly-backup succeeded');
  const ran = (name: string) => lines.filter((l) => l.startsWith(`  ${name} `)).length;
  expect([ran('snapshot'), ran('copy'), ran('verify'), ran('prune')]).toEqual([1, 1, 2, 1]);
}, 120_000);
