// Linear growth, checked by counting instead of timing (timing is measured in bench/): the work
// the engine does per task — log writes, log entries, clock reads, events — is the same for
// 1,000, 2,000 and 10,000 tasks, forward and in rollback. f(n) is affine exactly when
// f(10k) - f(1k) = 9 × (f(2k) - f(1k)).
import { describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '@rigging/core';
import { Engine, FlowFailed, linearFlow, memoryLog, task, type TaskLog } from '../src/index.js';

interface Counts {
  writes: number;
  entries: number;
  clock: number;
  events: number;
  executes: number;
  reverts: number;
}

async function count(n: number, failLast: boolean): Promise<Counts> {
  const c: Counts = { writes: 0, entries: 0, clock: 0, events: 0, executes: 0, reverts: 0 };
  const inner = memoryLog();
  const log: TaskLog = {
    ...inner,
    create(record, entries) {
      c.writes++;
      c.entries += entries.length;
      return inner.create(record, entries);
    },
    append(flowId, entries, update) {
      c.writes++;
      c.entries += entries.length;
      return inner.append(flowId, entries, update);
    },
  };
  const clock: Clock = {
    now: () => {
      c.clock++;
      return systemClock.now();
    },
    sleep: (ms, options) => systemClock.sleep(ms, options),
  };
  const tasks = Array.from({ length: n }, (_, i) =>
    task({
      name: `t${i}`,
      execute: () => {
        c.executes++;
        if (failLast && i === n - 1) throw new Error('last fails');
        return i;
      },
      revert: () => {
        c.reverts++;
      },
    }),
  );
  const engine = new Engine({ log, clock });
  engine.on('task:state', () => c.events++);
  engine.on('flow:state', () => c.events++);
  const run = engine.run(linearFlow('scale', ...tasks), { inputs: {} });
  if (failLast) await expect(run).rejects.toThrow(FlowFailed);
  else await run;
  return c;
}

const sizes = [1000, 2000, 10_000] as const;

describe('work per task does not grow with the flow (counted, not timed)', () => {
  for (const failLast of [false, true]) {
    it(`${failLast ? 'rollback' : 'forward'}: 1k, 2k, 10k tasks cost an affine number of operations`, async () => {
      const [a, b, c] = await Promise.all(sizes.map((n) => count(n, failLast)));
      for (const key of Object.keys(a!) as (keyof Counts)[]) {
        const perThousand = b![key] - a![key];
        expect(c![key] - a![key], key).toBe(9 * perThousand);
        expect(perThousand, key).toBeLessThanOrEqual(4 * 1000); // a handful per task
      }
      // Exactly one durable write per task: the flow is created with the first task's RUNNING,
      // each task's SUCCESS is written with the next task's RUNNING, the last one with the
      // flow's SUCCESS. Rolled back: the failing task's FAILURE and the flow's REVERTING, then
      // one write per reverted task (its REVERTING, with the previous task's REVERTED), the
      // last REVERTED with the flow's. Entries stay RUNNING + SUCCESS (+ REVERTING + REVERTED).
      const n = sizes[2];
      if (!failLast) {
        expect(c!.writes).toBe(n + 1);
        expect(c!.entries).toBe(2 * n + 2);
      } else {
        expect(c!.reverts).toBe(n - 1);
        expect(c!.writes).toBe(n + 2 + (n - 1) + 1);
        expect(c!.entries).toBe(2 * n + 2 * (n - 1) + 3);
      }
    });
  }
});
