import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

const child = fileURLToPath(new URL('./fixtures/recovery-child.ts', import.meta.url));
const N = 20;

/** SIGKILL mid-flow, then a new engine recovers the flow by itself, on the database at `url()`. */
export function recoverySuite(url: () => string, tag: string): void {
  it(`[${tag}] a new engine resumes a flow whose process was SIGKILLed, with no resume call, never re-running a completed task`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-recovery-'));
    try {
      const side = join(dir, 'side');
      const killAt = 1 + Math.floor(Math.random() * (N - 2));
      const flowId = `recover-${tag}-${killAt}`;
      const first = spawnNode(child, [url(), 'run', flowId, N, killAt, side].map(String));
      expect(await first.exited, first.stderr()).toBe('SIGKILL');

      const second = spawnNode(child, [url(), 'recover', flowId, N, -1, side].map(String));
      expect(await second.exited, second.stderr()).toBe(0);
      expect(second.lines, `killAt=${killAt}`).toContain('outcome succeeded');

      const lines = readFileSync(side, 'utf8').trim().split('\n');
      expect(lines.filter((l) => l.startsWith('R '))).toEqual([]);
      const runs = new Map<number, string[]>();
      for (const l of lines) {
        const [, i, pid] = l.split(' ');
        runs.set(Number(i), [...(runs.get(Number(i)) ?? []), pid!]);
      }
      for (let i = 0; i < N; i++) {
        // The task in flight at the kill runs again; every completed task ran exactly once.
        expect(runs.get(i)?.length, `task ${i} (killAt=${killAt})`).toBe(i === killAt ? 2 : 1);
      }
      // Tasks after the kill ran in the recovering process.
      expect(new Set(runs.get(N - 1))).not.toContain(runs.get(0)![0]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
}
