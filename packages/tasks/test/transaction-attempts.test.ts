// The transactional attempt (`transaction: true`, `src/run-attempts.ts`) on the SQL log over an
// in-memory SQLite database: which failures are the task's (retried, reverted as any task's) and
// which are the log's (the run stops, nothing of the attempt written, a resume runs it again).
// The same guarantees on SQLite files, PostgreSQL and MariaDB, with SIGKILL, are in
// `transaction-task.integration.test.ts`.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, RiggingError, type Logger } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import {
  Engine,
  FlowFailed,
  linearFlow,
  task,
  times,
  type LogEntry,
  type Task,
  type TaskContext,
  type TaskLog,
} from '../src/index.js';
import { sqlLog, sqlTransaction } from '../src/sql.js';

interface Tables {
  effects: { flow_id: string; task: string };
}

const brief = (e: LogEntry) => `${e.task ?? 'flow'} ${e.state}${e.attempt ? ` ${e.attempt}` : ''}`;

let database: Database;
let log: TaskLog;

beforeEach(async () => {
  database = await openDatabase('sqlite::memory:');
  await database.db.schema
    .createTable('effects')
    .addColumn('flow_id', 'text', (c) => c.notNull())
    .addColumn('task', 'text', (c) => c.notNull())
    .execute();
  log = await sqlLog(database);
});
afterEach(async () => {
  await database.close();
});

/** The tasks whose rows are committed for `flowId`, in insertion order. */
const rows = async (flowId: string) =>
  (
    await (database as unknown as Database<Tables>).db
      .selectFrom('effects')
      .select('task')
      .where('flow_id', '=', flowId)
      .execute()
  ).map((r) => r.task);

/** A transactional task that inserts its row, then runs `then` inside the transaction. */
function inserting(name: string, then?: (ctx: TaskContext) => unknown, retry = times(2)): Task {
  return task({
    name,
    transaction: true,
    retry,
    execute: (ctx) =>
      sqlTransaction<Tables, unknown>(ctx, async (trx) => {
        await trx.insertInto('effects').values({ flow_id: ctx.flowId, task: name }).execute();
        return (await then?.(ctx)) ?? name;
      }),
  }) as Task;
}

/** `log`, with its transaction refused at commit (after the work) while `refuse()` says so. */
function refusingLog(inner: TaskLog, refuse: () => Error | undefined): TaskLog {
  return {
    create: (record, entries) => inner.create(record, entries),
    append: (flowId, entries, update) => inner.append(flowId, entries, update),
    load: (flowId) => inner.load(flowId),
    history: (flowId) => inner.history(flowId),
    flows: (options) => inner.flows(options),
    remove: (flowId) => inner.remove(flowId),
    isConnectionLoss: (error) => inner.isConnectionLoss?.(error) ?? false,
    transaction: (flowId, work) =>
      inner.transaction!(flowId, async (trx) => {
        const write = await work(trx);
        const error = refuse();
        if (error) throw error;
        return write;
      }),
  };
}

describe('a transactional attempt', () => {
  it('a failed attempt leaves none of its writes and is retried after its backoff; the retry commits once', async () => {
    const clock = new ManualClock();
    const engine = new Engine({ log, clock });
    const attempts: number[] = [];
    const flaky = inserting(
      'flaky',
      (ctx) => {
        attempts.push(ctx.attempt);
        if (ctx.attempt < 3) throw new Error(`attempt ${ctx.attempt} fails after its insert`);
      },
      times(2, 100),
    );
    const running = engine.run(linearFlow('retried', flaky), { inputs: {}, flowId: 'retried' });
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    expect(await rows('retried')).toEqual([]);
    await clock.advance(100);
    await expect.poll(() => clock.pendingSleeps).toBe(1);
    await clock.advance(100);
    expect(await running).toEqual({});
    expect(attempts).toEqual([1, 2, 3]);
    expect(await rows('retried')).toEqual(['flaky']);
    const entries = await engine.history('retried');
    expect(entries.map(brief)).toEqual([
      'flow RUNNING',
      'flaky RETRYING 1',
      'flaky RETRYING 2',
      'flaky SUCCESS 3',
      'flow SUCCESS',
    ]);
    expect(entries[1]!.failure).toMatchObject({ message: 'attempt 1 fails after its insert' });
  });

  it('a task that fails for good is reverted with the rest; its writes were never committed', async () => {
    const reverted: string[] = [];
    const plain = task({
      name: 'plain',
      execute: () => 'p',
      revert: () => {
        reverted.push('plain');
      },
    }) as Task;
    const broken = inserting(
      'broken',
      () => {
        throw new Error('always');
      },
      times(1),
    );
    const engine = new Engine({ log });
    const error = await engine
      .run(linearFlow('fails', plain, broken), { inputs: {}, flowId: 'fails' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlowFailed);
    expect((error as FlowFailed).failures[0]).toMatchObject({ task: 'broken', message: 'always' });
    expect(reverted).toEqual(['plain']);
    expect(await rows('fails')).toEqual([]);
    expect((await engine.history('fails')).map(brief)).toEqual([
      'flow RUNNING',
      'plain RUNNING 1',
      'plain SUCCESS 1',
      'broken RETRYING 1',
      'broken FAILURE 2',
      'flow REVERTING',
      'plain REVERTING 1',
      'plain REVERTED 1',
      'flow REVERTED',
    ]);
  });

  it('a result the log cannot store fails the task at once, retries notwithstanding; its writes are rolled back', async () => {
    let calls = 0;
    const bad = inserting('bad', () => {
      calls++;
      return () => 'not JSON';
    });
    const engine = new Engine({ log });
    const error = await engine
      .run(linearFlow('bad-flow', bad), { inputs: {}, flowId: 'bad' })
      .catch((e: unknown) => e);
    expect((error as FlowFailed).failures[0]?.code).toBe('tasks.result_not_serializable');
    expect(calls).toBe(1);
    expect(await rows('bad')).toEqual([]);
    expect((await engine.history('bad')).map(brief)).toContain('bad FAILURE 1');
  });

  it('a task that throws after its transaction committed stays done (a warning says so); the flow goes on', async () => {
    const warnings: unknown[] = [];
    const logger = {
      trace: () => {},
      debug: () => {},
      info: () => {},
      warn: (obj: unknown, msg?: string) => warnings.push([obj, msg]),
      error: () => {},
      fatal: () => {},
      child: () => logger,
    } as unknown as Logger;
    let calls = 0;
    const after = task({
      name: 'after',
      transaction: true,
      retry: times(3),
      execute: async (ctx) => {
        calls++;
        await sqlTransaction<Tables, unknown>(ctx, async (trx) => {
          await trx.insertInto('effects').values({ flow_id: ctx.flowId, task: 'after' }).execute();
          return 'after';
        });
        throw new Error('after the commit');
      },
    }) as Task;
    const next = inserting('next');
    const engine = new Engine({ log, logger });
    expect(await engine.run(linearFlow('f', after, next), { inputs: {}, flowId: 'late' })).toEqual(
      {},
    );
    expect(calls).toBe(1);
    expect(await rows('late')).toEqual(['after', 'next']);
    expect((await engine.history('late')).map(brief)).toEqual([
      'flow RUNNING',
      'after SUCCESS 1',
      'next SUCCESS 1',
      'flow SUCCESS',
    ]);
    expect(warnings).toEqual([
      [
        {
          err: expect.objectContaining({ message: 'after the commit' }),
          flowId: 'late',
          task: 'after',
        },
        'task threw after its transaction committed; it stays done',
      ],
    ]);
  });

  it('ctx.transaction is refused a second time in one attempt once it committed', async () => {
    let second: unknown;
    const twice = task({
      name: 'twice',
      transaction: true,
      execute: async (ctx) => {
        await ctx.transaction!(() => 1);
        second = await ctx.transaction!(() => 2).catch((e: unknown) => e);
        return 3;
      },
    }) as Task;
    const engine = new Engine({ log });
    await engine.run(linearFlow('f', twice), { inputs: {}, flowId: 'twice' });
    expect(second).toBeInstanceOf(TypeError);
    expect((second as Error).message).toBe(
      "task 'twice': ctx.transaction may be called once per attempt",
    );
    const success = (await engine.history('twice')).find((e) => e.task === 'twice');
    expect(success).toMatchObject({ state: 'SUCCESS', result: 1 });
  });

  it('a task may call ctx.transaction again after its own work failed in it', async () => {
    const twice = task({
      name: 'again',
      transaction: true,
      execute: async (ctx) => {
        await ctx.transaction!(() => {
          throw new Error('first try');
        }).catch(() => undefined);
        return ctx.transaction!(() => 'second');
      },
    }) as Task;
    const engine = new Engine({ log });
    await engine.run(linearFlow('f', twice), { inputs: {}, flowId: 'again' });
    expect((await engine.history('again')).map((e) => [brief(e), e.result ?? null])).toEqual([
      ['flow RUNNING', null],
      ['again SUCCESS 1', 'second'],
      ['flow SUCCESS', null],
    ]);
  });

  it("the log's failure at commit stops the run with it, whatever the task's controller; nothing of the attempt is written, and a resume runs it once", async () => {
    let refusal: Error | undefined = new Error('commit refused');
    const refusing = refusingLog(log, () => refusal);
    let calls = 0;
    const refused = inserting('refused', () => {
      calls++;
    });
    const plain = task({ name: 'plain', execute: () => 'p' }) as Task;
    const flow = linearFlow('f', plain, refused);
    const engine = new Engine({ log: refusing });
    const error = await engine
      .run(flow, { inputs: {}, flowId: 'refused' })
      .catch((e: unknown) => e);
    expect(error).toBe(refusal);
    expect(calls).toBe(1);
    expect(await rows('refused')).toEqual([]);
    expect((await engine.history('refused')).map(brief)).toEqual([
      'flow RUNNING',
      'plain RUNNING 1',
      'plain SUCCESS 1',
    ]);
    refusal = undefined;
    expect(await engine.resume('refused', flow)).toEqual({});
    expect(calls).toBe(2);
    expect(await rows('refused')).toEqual(['refused']);
  });

  it('a task error the log calls a lost connection stops the run instead of retrying', async () => {
    const lost = new Error('connection gone');
    const losing: TaskLog = {
      ...refusingLog(log, () => undefined),
      isConnectionLoss: (e) => e === lost,
    };
    let calls = 0;
    const t = inserting('t', () => {
      calls++;
      throw lost;
    });
    const engine = new Engine({ log: losing });
    const error = await engine
      .run(linearFlow('f', t), { inputs: {}, flowId: 'lost' })
      .catch((e: unknown) => e);
    expect(error).toBe(lost);
    expect(calls).toBe(1);
    expect((await engine.history('lost')).map(brief)).toEqual([]);
  });

  it('a suspend asked when the previous task’s SUCCESS is written: the transactional task is not started; resume runs it once', async () => {
    let calls = 0;
    const engine = new Engine({ log });
    const plain = task({ name: 'plain', execute: () => 'p' }) as Task;
    const tx = inserting('tx', () => {
      calls++;
    });
    const flow = linearFlow('f', plain, tx);
    let suspended: Promise<boolean> | undefined;
    const off = engine.on('task:state', (e) => {
      if (e.task === 'plain' && e.state === 'SUCCESS') suspended = engine.suspend('paused');
    });
    const error = await engine.run(flow, { inputs: {}, flowId: 'paused' }).catch((e: unknown) => e);
    off();
    expect(RiggingError.hasCode(error, 'tasks.suspended')).toBe(true);
    expect(await suspended).toBe(true);
    expect(calls).toBe(0);
    await engine.resume('paused', flow);
    expect(calls).toBe(1);
    const tx1 = (await engine.history('paused')).filter((e) => e.task === 'tx').map(brief);
    expect(tx1).toEqual(['tx SUCCESS 1']);
  });

  it('a transactional attempt that fails after the run was cancelled is CANCELLED, not retried', async () => {
    const ac = new AbortController();
    let calls = 0;
    const t = inserting('t', () => {
      calls++;
      ac.abort(new Error('cancel'));
      throw new Error('broke');
    });
    const engine = new Engine({ log });
    const error = await engine
      .run(linearFlow('f', t), { inputs: {}, flowId: 'cancelled', signal: ac.signal })
      .catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.cancelled')).toBe(true);
    expect(calls).toBe(1);
    expect((await engine.history('cancelled')).map(brief)).toContain('t CANCELLED 1');
  });
});

describe('a transactional attempt: what it returns and whose failure it is', () => {
  it('a task that returns without calling ctx.transaction commits its SUCCESS alone, with its result; the next task runs', async () => {
    const quiet = task({ name: 'quiet', transaction: true, execute: () => ({ n: 1 }) }) as Task;
    const empty = task({ name: 'empty', transaction: true, execute: () => undefined }) as Task;
    const last = inserting('last');
    const engine = new Engine({ log });
    await engine.run(linearFlow('f', quiet, empty, last), { inputs: {}, flowId: 'quiet' });
    const entries = await engine.history('quiet');
    expect(entries.map(brief)).toEqual([
      'flow RUNNING',
      'quiet SUCCESS 1',
      'empty SUCCESS 1',
      'last SUCCESS 1',
      'flow SUCCESS',
    ]);
    expect(entries.slice(1, 4).map((e) => e.result)).toEqual([{ n: 1 }, null, 'last']);
    expect(await rows('quiet')).toEqual(['last']);
  });

  it('work that returns nothing is stored as null', async () => {
    const nothing = task({
      name: 'nothing',
      transaction: true,
      execute: (ctx) => ctx.transaction!(() => undefined),
    }) as Task;
    const engine = new Engine({ log });
    await engine.run(linearFlow('f', nothing), { inputs: {}, flowId: 'nothing' });
    const success = (await engine.history('nothing')).find((e) => e.task === 'nothing');
    expect(success).toMatchObject({ state: 'SUCCESS', result: null });
  });

  it("the log's failure while rolling back the task's failed work is the log's: the run stops with it", async () => {
    const rollback = new Error('rollback failed');
    const failing: TaskLog = {
      ...refusingLog(log, () => undefined),
      transaction: (flowId, work) =>
        log.transaction!(flowId, async (trx) => {
          try {
            return await work(trx);
          } catch {
            throw rollback;
          }
        }),
    };
    let calls = 0;
    const t = inserting('t', () => {
      calls++;
      throw new Error('the task broke');
    });
    const error = await new Engine({ log: failing })
      .run(linearFlow('f', t), { inputs: {}, flowId: 'rollback' })
      .catch((e: unknown) => e);
    expect(error).toBe(rollback);
    expect(calls).toBe(1);
  });

  it("a task that throws its own error instead of the log's refusal fails as a task does: it is retried", async () => {
    let refusals = 1;
    const refusing = refusingLog(log, () =>
      refusals-- > 0 ? new Error('commit refused') : undefined,
    );
    const attempts: number[] = [];
    const t = task({
      name: 't',
      transaction: true,
      retry: times(1),
      execute: async (ctx) => {
        attempts.push(ctx.attempt);
        try {
          return await ctx.transaction!(() => 'done');
        } catch (error) {
          throw new Error(`wrapped: ${(error as Error).message}`);
        }
      },
    }) as Task;
    const engine = new Engine({ log: refusing });
    await engine.run(linearFlow('f', t), { inputs: {}, flowId: 'wrapped' });
    expect(attempts).toEqual([1, 2]);
    const entries = await engine.history('wrapped');
    expect(entries.map(brief)).toEqual([
      'flow RUNNING',
      't RETRYING 1',
      't SUCCESS 2',
      'flow SUCCESS',
    ]);
    expect(entries[1]!.failure).toMatchObject({ message: 'wrapped: commit refused' });
  });

  it('only the result check itself fails a task without retry: its own error in place of it, or a thrown undefined, is retried', async () => {
    const fails = [
      async (ctx: TaskContext) => {
        await ctx.transaction!(() => () => 'not JSON').catch(() => undefined);
        throw new Error('own error');
      },
      () => {
        throw undefined;
      },
    ];
    for (const [k, fail] of fails.entries()) {
      const attempts: number[] = [];
      const t = task({
        name: 't',
        transaction: true,
        retry: times(1),
        execute: async (ctx) => {
          attempts.push(ctx.attempt);
          if (ctx.attempt === 1) await fail(ctx);
          return 'fine';
        },
      }) as Task;
      const engine = new Engine({ log });
      const flowId = `own-${k}`;
      await engine.run(linearFlow('f', t), { inputs: {}, flowId });
      expect(attempts).toEqual([1, 2]);
      expect((await engine.history(flowId)).map(brief)).toContain('t RETRYING 1');
    }
  });
});

describe('a stop asked while a RUNNING entry is written', () => {
  it('on a log whose writes take time: the task is not executed, it is logged PENDING again, and resume runs it once', async () => {
    const engine = new Engine({ log });
    const runs: string[] = [];
    const step = (name: string) =>
      task({ name, provides: name, execute: () => (runs.push(name), name) }) as Task;
    const flow = linearFlow('f', step('a'), step('b'));
    let suspended: Promise<boolean> | undefined;
    const off = engine.on('task:state', (e) => {
      if (e.task === 'a' && e.state === 'SUCCESS') suspended = engine.suspend('async-stop');
    });
    const error = await engine
      .run(flow, { inputs: {}, flowId: 'async-stop' })
      .catch((e: unknown) => e);
    off();
    expect(RiggingError.hasCode(error, 'tasks.suspended')).toBe(true);
    expect(await suspended).toBe(true);
    expect(runs).toEqual(['a']);
    expect((await engine.history('async-stop')).filter((e) => e.task === 'b').map(brief)).toEqual([
      'b RUNNING 1',
      'b PENDING',
    ]);
    expect(await engine.resume('async-stop', flow)).toEqual({ a: 'a', b: 'b' });
    expect(runs).toEqual(['a', 'b']);
  });
});

describe('the last task committing the flow’s end', () => {
  it('a stop asked after the last transactional task committed does not undo the success: the flow has succeeded', async () => {
    for (const stop of ['suspend', 'cancel'] as const) {
      const ac = new AbortController();
      const engine = new Engine({ log });
      const flowId = `ended-${stop}`;
      const last = task({
        name: 'last',
        transaction: true,
        provides: 'out',
        execute: async (ctx) => {
          const value = await ctx.transaction!(() => 'v');
          if (stop === 'suspend') void engine.suspend(flowId);
          else ac.abort(new Error('too late'));
          return value;
        },
      }) as Task;
      const out = await engine.run(linearFlow('f', last), {
        inputs: {},
        flowId,
        signal: ac.signal,
      });
      expect(out).toEqual({ out: 'v' });
      expect((await engine.history(flowId)).map(brief)).toEqual([
        'flow RUNNING',
        'last SUCCESS 1',
        'flow SUCCESS',
      ]);
    }
  });
});
