// Tasks defined with `transaction: true`: `execute` runs in a transaction of the SQL log's
// database, committed with the task's SUCCESS (and the flow's creation or end). Their writes
// happen exactly once: a failed attempt, a fenced owner and a SIGKILL before the commit leave
// nothing behind, and the task costs one commit.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { sqlBackends, spawnNode, type FreshDatabase } from '@rigging/testkit';
import {
  Engine,
  FlowFailed,
  linearFlow,
  memoryLog,
  task,
  times,
  type LogEntry,
  type Task,
  type TaskContext,
} from '../src/index.js';
import { sqlLog, sqlTransaction } from '../src/sql.js';

interface Tables {
  tx_effects: { flow_id: string; task: string };
}

const child = fileURLToPath(new URL('./fixtures/transaction-kill-child.ts', import.meta.url));
const brief = (e: LogEntry) => `${e.task ?? 'flow'} ${e.state}${e.attempt ? ` ${e.attempt}` : ''}`;

/**
 * A task that runs `before` outside any transaction, then inserts its row through its
 * transaction and runs `then` in it before returning (`then`'s value, or its name, is its result).
 */
function inserting(
  name: string,
  then?: (ctx: TaskContext) => unknown,
  before?: (ctx: TaskContext) => unknown,
): Task {
  return task({
    name,
    transaction: true,
    retry: times(3),
    execute: async (ctx) => {
      await before?.(ctx);
      return sqlTransaction<Tables, unknown>(ctx, async (trx) => {
        await trx.insertInto('tx_effects').values({ flow_id: ctx.flowId, task: name }).execute();
        return (await then?.(ctx)) ?? name;
      });
    },
    revert: async (ctx) => {
      // Reverts run outside any transaction.
      expect(ctx.transaction).toBeUndefined();
    },
  }) as Task;
}

describe('transaction: true without a SQL log', () => {
  it('is refused before anything runs (tasks.transaction_unsupported)', async () => {
    const engine = new Engine({ log: memoryLog() });
    const flow = linearFlow('f', inserting('a'));
    await expect(engine.run(flow, { inputs: {} })).rejects.toMatchObject({
      code: 'tasks.transaction_unsupported',
    });
    expect(await engine.flows()).toEqual([]);
  });

  it('sqlTransaction(ctx, work) names the task when it has no transaction', () => {
    expect(() =>
      sqlTransaction({ task: 'plain', transaction: undefined } as unknown as TaskContext, () => 1),
    ).toThrow(/task 'plain' has no transaction/);
  });

  it('refuses a non-boolean option', () => {
    expect(() => task({ name: 'x', transaction: 'yes' as never, execute: () => null })).toThrow(
      TypeError,
    );
  });
});

const backends = await sqlBackends('tasks_tx', ['sqlite-file', 'postgres', 'mysql']);
for (const backend of backends) {
  describe.skipIf(!backend.available)(`transactional tasks: ${backend.kind}`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let engine: Engine;

    const rows = async (flowId: string) =>
      (
        await (database as unknown as Database<Tables>).db
          .selectFrom('tx_effects')
          .select('task')
          .where('flow_id', '=', flowId)
          .orderBy('task')
          .execute()
      ).map((r) => r.task);
    const writes = async (flowId: string) => {
      const { rows: found } = await sql<{
        writes: number | string;
      }>`select writes from rigging_tasks_flows where flow_id = ${flowId}`.execute(database.db);
      return Number(found[0]!.writes);
    };

    beforeAll(async () => {
      fresh = await backend.create();
      database = await openDatabase(fresh.url);
      await sql`create table tx_effects (flow_id varchar(100) not null, task varchar(50) not null)`.execute(
        database.db,
      );
      engine = new Engine({ log: await sqlLog(database) });
    });
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    });

    it('a flow of three runs in three commits: no RUNNING entries, the flow created with the first and ended with the last', async () => {
      const flow = linearFlow('three', inserting('a'), inserting('b'), inserting('c'));
      const out = await engine.run(flow, { inputs: {}, flowId: 'three' });
      expect(out).toEqual({});
      expect(await rows('three')).toEqual(['a', 'b', 'c']);
      expect((await engine.history('three')).map(brief)).toEqual([
        'flow RUNNING',
        'a SUCCESS 1',
        'b SUCCESS 1',
        'c SUCCESS 1',
        'flow SUCCESS',
      ]);
      // `writes` counts appends (the creation is not one): b's and c's commits.
      expect(await writes('three')).toBe(2);
      expect((await engine.flows()).find((f) => f.flowId === 'three')?.state).toBe('SUCCESS');
    });

    it('events: RUNNING, SUCCESS with the result, the flow created and ended', async () => {
      const seen: string[] = [];
      const onTask = (e: { task: string; state: string; result?: unknown }) =>
        seen.push(`${e.task} ${e.state}${e.result !== undefined ? ` ${String(e.result)}` : ''}`);
      const onFlow = (e: { state: string }) => seen.push(`flow ${e.state}`);
      const offs = [engine.on('task:state', onTask), engine.on('flow:state', onFlow)];
      try {
        await engine.run(linearFlow('one', inserting('only')), { inputs: {}, flowId: 'one' });
      } finally {
        for (const off of offs) off();
      }
      expect(seen).toEqual(['only RUNNING', 'flow RUNNING', 'only SUCCESS only', 'flow SUCCESS']);
      expect(await writes('one')).toBe(0); // created and ended in one commit
    });

    it('a failed attempt leaves none of its writes; the retry commits once', async () => {
      let calls = 0;
      const flaky = inserting('flaky', () => {
        if (++calls < 3) throw new Error(`attempt ${calls} fails after its insert`);
      });
      await engine.run(linearFlow('retried', flaky), { inputs: {}, flowId: 'retried' });
      expect(calls).toBe(3);
      expect(await rows('retried')).toEqual(['flaky']);
      expect((await engine.history('retried')).map(brief)).toEqual([
        'flow RUNNING',
        'flaky RETRYING 1',
        'flaky RETRYING 2',
        'flaky SUCCESS 3',
        'flow SUCCESS',
      ]);
    });

    it('what execute does before ctx.transaction holds no transaction: another connection writes meanwhile', async () => {
      const outside = inserting('inside', undefined, async (ctx) => {
        const other = await openDatabase(fresh.url);
        try {
          await (other as unknown as Database<Tables>).db
            .insertInto('tx_effects')
            .values({ flow_id: ctx.flowId, task: 'outside' })
            .execute();
        } finally {
          await other.close();
        }
      });
      await engine.run(linearFlow('before', outside), { inputs: {}, flowId: 'before' });
      expect(await rows('before')).toEqual(['inside', 'outside']);
    });

    it("runOrResume of a flow the log has: resumeFirst keeps its first task's execute from running again", async () => {
      let calls: Record<string, number> = {};
      const counted = (name: string, before?: () => void) =>
        inserting(name, undefined, () => {
          calls[name] = (calls[name] ?? 0) + 1;
          before?.();
        });
      /** Leaves flow `flowId` after two of its three tasks (suspended, as a dead owner leaves it), then runs or resumes it. */
      const leftThenAgain = async (flowId: string, resumeFirst?: boolean) => {
        const leave = new AbortController();
        const flow = linearFlow(
          'left',
          counted('a'),
          counted('b', () => leave.abort()),
          counted('c'),
        );
        await expect(
          engine.runOrResume(flow, { flowId, inputs: {}, signal: leave.signal }),
        ).rejects.toMatchObject({ code: 'tasks.suspended' });
        calls = {};
        await engine.runOrResume(flow, {
          flowId,
          inputs: {},
          ...(resumeFirst === undefined ? {} : { resumeFirst }),
        });
        return calls;
      };
      // Without it, a run is tried first: 'a' runs again up to its commit (rolled back: the flow
      // exists), then the resume skips it. Its writes stay once either way.
      expect(await leftThenAgain('left-run')).toEqual({ a: 1, c: 1 });
      expect(await rows('left-run')).toEqual(['a', 'b', 'c']);
      // With it, the resume comes first: only 'c' runs.
      expect(await leftThenAgain('left-resume', true)).toEqual({ c: 1 });
      expect(await rows('left-resume')).toEqual(['a', 'b', 'c']);
      // A flow the log does not have is run, once.
      calls = {};
      await engine.runOrResume(linearFlow('fresh', counted('a'), counted('c')), {
        flowId: 'left-new',
        inputs: {},
        resumeFirst: true,
      });
      expect(calls).toEqual({ a: 1, c: 1 });
      expect(await rows('left-new')).toEqual(['a', 'c']);
      await expect(
        engine.runOrResume(linearFlow('fresh', counted('a')), {
          flowId: 'left-bad',
          inputs: {},
          resumeFirst: 'yes' as never,
        }),
      ).rejects.toThrow(/resumeFirst must be a boolean/);
      expect(await rows('left-bad')).toEqual([]);
    });

    it('a task that returns without calling ctx.transaction commits its SUCCESS alone', async () => {
      const quiet = task({ name: 'quiet', transaction: true, execute: () => ({ n: 1 }) }) as Task;
      const out = await engine.run(linearFlow('quiet-flow', quiet), {
        inputs: {},
        flowId: 'quiet',
      });
      expect(out).toEqual({});
      expect((await engine.history('quiet')).map((e) => [brief(e), e.result ?? null])).toEqual([
        ['flow RUNNING', null],
        ['quiet SUCCESS 1', { n: 1 }],
        ['flow SUCCESS', null],
      ]);
    });

    it('a result that is not JSON fails the task and rolls its writes back', async () => {
      const bad = inserting('bad', () => ({ when: new Date() }));
      const failed = await engine
        .run(linearFlow('bad-result', inserting('before'), bad), {
          inputs: {},
          flowId: 'bad-result',
        })
        .catch((e: unknown) => e);
      expect(failed).toBeInstanceOf(FlowFailed);
      expect((failed as FlowFailed).failures[0]?.code).toBe('tasks.result_not_serializable');
      expect(await rows('bad-result')).toEqual(['before']); // 'before' is reverted by its own revert
      const log = (await engine.history('bad-result')).map(brief);
      expect(log).toContain('bad FAILURE 1');
      expect(log).toContain('before REVERTED 1');
    });

    // (not on SQLite: opening the log on another connection migrates, and waits on the open transaction)
    it.skipIf(backend.kind === 'sqlite-file')(
      'after an ordinary task, its SUCCESS is written before the transaction starts',
      async () => {
        const plain = task({ name: 'plain', execute: () => 'p' }) as Task;
        let seenPlain: string[] = [];
        const after = inserting('after', async () => {
          // Another connection sees plain's SUCCESS while this transaction is still open.
          const other = await openDatabase(fresh.url);
          try {
            seenPlain = (await (await sqlLog(other)).history('mixed')).map(brief);
          } finally {
            await other.close();
          }
        });
        await engine.run(linearFlow('mixed', plain, after), { inputs: {}, flowId: 'mixed' });
        expect(seenPlain).toEqual(['flow RUNNING', 'plain RUNNING 1', 'plain SUCCESS 1']);
        expect((await engine.history('mixed')).map(brief)).toEqual([
          'flow RUNNING',
          'plain RUNNING 1',
          'plain SUCCESS 1',
          'after SUCCESS 1',
          'flow SUCCESS',
        ]);
      },
    );

    it.skipIf(backend.kind === 'sqlite-file')(
      'an owner fenced while its task ran: nothing of the task is written',
      async () => {
        const lease = (token: bigint) => ({
          key: 'k',
          token,
          lost: new AbortController().signal,
          release: async () => {},
        });
        const flow = linearFlow(
          'fenced',
          inserting('a'),
          inserting('b', async (ctx) => {
            // A newer owner writes to the flow (its token 7) while this one, token 5, runs b.
            await sql`update rigging_tasks_flows set token = 7 where flow_id = ${ctx.flowId}`.execute(
              database.db,
            );
          }),
        );
        const failed = await engine
          .run(flow, { inputs: {}, flowId: 'fenced', lease: lease(5n) as never })
          .catch((e: unknown) => e);
        expect(failed).toMatchObject({ code: 'tasks.fenced' });
        expect(await rows('fenced')).toEqual(['a']);
        expect((await engine.history('fenced')).map(brief)).toEqual([
          'flow RUNNING',
          'a SUCCESS 1',
        ]);
      },
    );

    it('SIGKILL inside a task before its commit: nothing of it is left; the resume runs it once', async () => {
      const n = 4;
      const killAt = 1 + Math.floor(Math.random() * (n - 1));
      const flowId = `killed-${killAt}`;
      const first = spawnNode(child, [fresh.url, flowId, 'run', String(n), String(killAt)]);
      expect(await first.exited).toBe('SIGKILL');
      const done = Array.from({ length: killAt }, (_, i) => `t${i}`);
      expect(await rows(flowId), `killAt=${killAt}`).toEqual(done);
      expect((await engine.history(flowId)).map(brief)).toEqual([
        'flow RUNNING',
        ...done.map((t) => `${t} SUCCESS 1`),
      ]);
      const second = spawnNode(child, [fresh.url, flowId, 'resume', String(n), '-1']);
      expect(await second.exited, second.stderr()).toBe(0);
      expect(second.lines).toContain('outcome success');
      expect(await rows(flowId)).toEqual(Array.from({ length: n }, (_, i) => `t${i}`));
    }, 60_000);
  });
}
