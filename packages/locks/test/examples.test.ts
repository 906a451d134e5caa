import { fileURLToPath } from 'node:url';
import { spawnNode } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const example = (name: string) => fileURLToPath(new URL(`../examples/${name}`, import.meta.url));

describe('README examples', () => {
  it('file-lock.ts', async () => {
    const child = spawnNode(example('file-lock.ts'));
    expect(await child.exited).toBe(0);
    expect(child.lines).toEqual([
      '3 shared holders of pkg/x',
      expect.stringMatching(
        /^waiting for exclusive lock 'pkg\/x', held shared by pid \d+ on .+ \(3 holders\) since \d\d:\d\d:\d\d$/,
      ),
      'exclusive lock on pkg/x, fencing token true',
      'holding pkg/a and pkg/b',
    ]);
  }, 60_000);

  it('sql-lock.ts', async () => {
    const child = spawnNode(example('sql-lock.ts'));
    const code = await child.exited;
    expect(code, child.stderr()).toBe(0);
    expect(child.lines).toEqual([
      'owner of workflow/42 with token true',
      'holder pid matches: true',
      'second acquire timed out',
    ]);
  }, 60_000);

  it('sql-fence.ts', async () => {
    const child = spawnNode(example('sql-fence.ts'));
    const code = await child.exited;
    expect(code, child.stderr()).toBe(0);
    expect(child.lines).toEqual(["A's stale write was refused", 'doc-1: written by B']);
  }, 60_000);
});
