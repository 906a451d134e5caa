import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { spawnNode } from '@rigging/testkit';

const child = fileURLToPath(new URL('./fixtures/crash-child.ts', import.meta.url));
const retryChild = fileURLToPath(new URL('./fixtures/flow-retry-child.ts', import.meta.url));
const N = 1000;

function counts(lines: string[], kind: 'E' | 'R'): Map<number, number> {
  const m = new Map<number, number>();
  for (const l of lines) {
    const [k, i] = l.split(' ');
    if (k === kind) m.set(Number(i), (m.get(Number(i)) ?? 0) + 1);
  }
  return m;
}

async function runChild(
  url: string,
  args: (string | number)[],
  script = child,
): Promise<{ code: number | string; lines: string[] }> {
  const c = spawnNode(script, [url, ...args.map(String)]);
  const code = await c.exited;
  if (code !== 'SIGKILL' && code !== 0)
    throw new Error(`child failed (${String(code)}): ${c.stderr()}`);
  return { code, lines: c.lines };
}

/** Crash/resume tests with real processes on the database at `url()`. */
export function crashSuite(url: () => string, tag: string): void {
  it.concurrent(
    `[${tag}] resumes a ${N}-task flow after SIGKILL inside a task, never re-running a completed task`,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-crash-'));
      try {
        const side = join(dir, 'side');
        const killAt = 1 + Math.floor(Math.random() * (N - 2));
        const flowId = `crash-run-${tag}-${killAt}`;
        const first = await runChild(url(), [flowId, 'run', N, killAt, -1, -1, side]);
        expect(first.code, `killAt=${killAt}`).toBe('SIGKILL');
        const second = await runChild(url(), [flowId, 'resume', N, -1, -1, -1, side]);
        expect(second.lines).toContain('outcome success');
        const lines = readFileSync(side, 'utf8').trim().split('\n');
        const e = counts(lines, 'E');
        for (let i = 0; i < N; i++)
          expect(e.get(i), `task ${i} (killAt=${killAt})`).toBe(i === killAt ? 2 : 1);
        expect(counts(lines, 'R').size).toBe(0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  it.concurrent(
    `[${tag}] resumes an interrupted revert after SIGKILL, reverting each completed task in reverse order`,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-crash-'));
      try {
        const side = join(dir, 'side');
        const failAt = N - 1;
        const killRevertAt = Math.floor(Math.random() * (N - 1));
        const flowId = `crash-revert-${tag}-${killRevertAt}`;
        const first = await runChild(url(), [flowId, 'run', N, -1, failAt, killRevertAt, side]);
        expect(first.code, `killRevertAt=${killRevertAt}`).toBe('SIGKILL');
        const second = await runChild(url(), [flowId, 'resume', N, -1, failAt, killRevertAt, side]);
        expect(second.lines).toContain('outcome tasks.flow_failed');
        const lines = readFileSync(side, 'utf8').trim().split('\n');
        expect(lines.filter((l) => l.startsWith('BAD'))).toEqual([]);
        const e = counts(lines, 'E');
        for (let i = 0; i < N; i++) expect(e.get(i), `exec ${i}`).toBe(1);
        const r = counts(lines, 'R');
        for (let i = 0; i < N - 1; i++)
          expect(r.get(i), `revert ${i} (killRevertAt=${killRevertAt})`).toBe(
            i === killRevertAt ? 2 : 1,
          );
        expect(r.has(N - 1)).toBe(false);
        const order = lines.filter((l) => l.startsWith('R ')).map((l) => Number(l.slice(2)));
        const firstSeen = order.filter((v, idx) => order.indexOf(v) === idx);
        expect(firstSeen).toEqual([...Array(N - 1).keys()].reverse());
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  // Side effects of the flow-retry child without a crash: the sub-flow's three attempts (one
  // parameter set each), then the escalation reverts everything.
  const nominal = [
    'E a -',
    ...['z1', 'z2', 'z3'].flatMap((z) => [
      `E b ${z}`,
      `E c ${z}`,
      `E d ${z}`,
      `R c ${z}`,
      `R b ${z}`,
    ]),
    'R a -',
  ];
  // Kill points: inside the first sub-flow revert, the second attempt's failing task, the end of
  // the second revert (before the third attempt is logged), the third attempt, the final revert.
  for (const killAt of [5, 9, 11, 14, 16]) {
    it.concurrent(
      `[${tag}] a sub-flow's retry count and parameter set survive SIGKILL (killed at side effect ${killAt})`,
      async () => {
        const dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-crash-'));
        try {
          const side = join(dir, 'side');
          const flowId = `crash-flow-retry-${tag}-${killAt}`;
          const first = await runChild(url(), [flowId, 'run', killAt, side], retryChild);
          expect(first.code).toBe('SIGKILL');
          const second = await runChild(url(), [flowId, 'resume', -1, side], retryChild);
          expect(second.lines).toContain('outcome tasks.flow_failed');
          const lines = readFileSync(side, 'utf8').trim().split('\n');
          // Exactly the uninterrupted run, with the side effect in flight at the kill done again.
          expect(lines).toEqual([...nominal.slice(0, killAt), ...nominal.slice(killAt - 1)]);
          expect(second.lines.filter((l) => l.startsWith('S '))).toEqual([
            'S inner RETRYING 1',
            'S inner RUNNING 2',
            'S inner RETRYING 2',
            'S inner RUNNING 3',
          ]);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      },
      120_000,
    );
  }
}
