// One durable commit per task: a task's SUCCESS is written with the next task's RUNNING (and a
// REVERTED with the next REVERTING). Killed right after such a commit and before the next
// effect, a resume must neither re-run the task whose SUCCESS was in it nor skip the task it
// started; its revert must see every completed task, with its result, in reverse order.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '@rigging/sql';
import { sqlBackends, spawnNode, type FreshDatabase } from '@rigging/testkit';
import type { LogEntry } from '../src/index.js';
import { sqlLog } from '../src/sql.js';

const child = fileURLToPath(new URL('./fixtures/commit-kill-child.ts', import.meta.url));
const N = 12;

async function runChild(url: string, args: (string | number)[]) {
  const c = spawnNode(child, [url, ...args.map(String)]);
  const code = await c.exited;
  if (code !== 'SIGKILL' && code !== 0)
    throw new Error(`child failed (${String(code)}): ${c.stderr()}`);
  return { code, lines: c.lines };
}

async function history(url: string, flowId: string): Promise<LogEntry[]> {
  const database = await openDatabase(url);
  try {
    return await (await sqlLog(database)).history(flowId);
  } finally {
    await database.close();
  }
}

function count(lines: string[], kind: 'E' | 'R'): Map<number, number> {
  const m = new Map<number, number>();
  for (const l of lines) {
    const [k, i] = l.split(' ');
    if (k === kind) m.set(Number(i), (m.get(Number(i)) ?? 0) + 1);
  }
  return m;
}

const brief = (e: LogEntry | undefined) => e && `${e.task ?? 'flow'} ${e.state}`;

const backends = await sqlBackends('tasks_commit', ['sqlite-file', 'postgres', 'mysql']);
for (const backend of backends) {
  describe.skipIf(!backend.available)(
    `SIGKILL between a combined commit and the next effect: ${backend.kind}`,
    () => {
      let fresh: FreshDatabase;
      let dir: string;
      beforeAll(async () => {
        fresh = await backend.create();
        dir = mkdtempSync(join(tmpdir(), 'rigging-tasks-commit-'));
      });
      afterAll(async () => {
        await fresh.drop();
        rmSync(dir, { recursive: true, force: true });
      });

      it('forward: the previous SUCCESS and the next RUNNING are one commit; resume runs every task once', async () => {
        const killAt = 1 + Math.floor(Math.random() * (N - 1));
        const flowId = `commit-forward-${killAt}`;
        const side = join(dir, flowId);
        const first = await runChild(fresh.url, [flowId, 'run', N, killAt, -1, -1, side]);
        expect(first.code).toBe('SIGKILL');
        const log = await history(fresh.url, flowId);
        expect(log.slice(-2).map(brief), `killAt=${killAt}`).toEqual([
          `t${killAt - 1} SUCCESS`,
          `t${killAt} RUNNING`,
        ]);
        // Killed before its effect: t(killAt) did not run.
        expect(count(readFileSync(side, 'utf8').trim().split('\n'), 'E').has(killAt)).toBe(false);
        const second = await runChild(fresh.url, [flowId, 'resume', N, -1, -1, -1, side]);
        expect(second.lines).toContain('outcome success');
        const e = count(readFileSync(side, 'utf8').trim().split('\n'), 'E');
        for (let i = 0; i < N; i++) expect(e.get(i), `task ${i} (killAt=${killAt})`).toBe(1);
      }, 120_000);

      it('forward then revert: the task whose SUCCESS was in the commit is reverted with its result, all in reverse order', async () => {
        const killAt = 1 + Math.floor(Math.random() * (N - 2));
        const flowId = `commit-revert-${killAt}`;
        const side = join(dir, flowId);
        const first = await runChild(fresh.url, [flowId, 'run', N, killAt, N - 1, -1, side]);
        expect(first.code).toBe('SIGKILL');
        const second = await runChild(fresh.url, [flowId, 'resume', N, -1, N - 1, -1, side]);
        expect(second.lines).toContain('outcome tasks.flow_failed');
        const lines = readFileSync(side, 'utf8').trim().split('\n');
        expect(lines.filter((l) => l.startsWith('BAD'))).toEqual([]);
        const e = count(lines, 'E');
        for (let i = 0; i < N; i++) expect(e.get(i), `exec ${i} (killAt=${killAt})`).toBe(1);
        const reverted = lines.filter((l) => l.startsWith('R ')).map((l) => Number(l.slice(2)));
        expect(reverted).toEqual([...Array(N - 1).keys()].reverse());
      }, 120_000);

      it('revert: the previous REVERTED and the next REVERTING are one commit; resume reverts every task once', async () => {
        const killRevertAt = Math.floor(Math.random() * (N - 2));
        const flowId = `commit-reverting-${killRevertAt}`;
        const side = join(dir, flowId);
        const args = [N, -1, N - 1, killRevertAt, side];
        const first = await runChild(fresh.url, [flowId, 'run', ...args]);
        expect(first.code).toBe('SIGKILL');
        const log = await history(fresh.url, flowId);
        expect(log.slice(-2).map(brief), `killRevertAt=${killRevertAt}`).toEqual([
          `t${killRevertAt + 1} REVERTED`,
          `t${killRevertAt} REVERTING`,
        ]);
        const second = await runChild(fresh.url, [flowId, 'resume', ...args]);
        expect(second.lines).toContain('outcome tasks.flow_failed');
        const lines = readFileSync(side, 'utf8').trim().split('\n');
        const reverted = lines.filter((l) => l.startsWith('R ')).map((l) => Number(l.slice(2)));
        expect(reverted, `killRevertAt=${killRevertAt}`).toEqual(
          [...Array(N - 1).keys()].reverse(),
        );
      }, 120_000);
    },
  );
}
