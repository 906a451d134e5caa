import { fileURLToPath } from 'node:url';
import { spawnNode } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const example = (name: string) => fileURLToPath(new URL(`../examples/${name}`, import.meta.url));

async function run(name: string): Promise<string[]> {
  const child = spawnNode(example(name));
  const code = await child.exited;
  if (code !== 0) throw new Error(`${name} exited with ${String(code)}: ${child.stderr()}`);
  return child.lines;
}

describe('examples', () => {
  it('containers.ts: per-container order, stop policy, resume', async () => {
    const lines = await run('containers.ts');
    expect(lines).toContain('web-1 stopped: true');
    expect(lines).toContain('cancelled web-2: stop');
    expect(lines).toContain('web-2 stop was cancelled');
    expect(lines).toContain('web-2 is blocked by op start');
    expect(lines).toContain('status web-2: blocked');
    expect(lines).toContain('web-2 start after resume: running');
    expect(lines).toContain("dead letters: [ 'web-2/start' ]");
  }, 60_000);

  it('jobboard.ts: durable cast, idempotency, result', async () => {
    const lines = await run('jobboard.ts');
    expect(lines).toEqual([
      'same op: true',
      'c1 created from alpine (attempt 1)',
      'status: succeeded',
    ]);
  }, 60_000);
});
