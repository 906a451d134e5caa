import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { openDatabase } from '@rigging/sql';
import type { FreshDatabase } from '@rigging/testkit';
import {
  Engine,
  FlowFailed,
  linearFlow,
  task,
  type FlowRecord,
  type TaskLog,
} from '../src/index.js';
import { sqlLog } from '../src/sql.js';

const record = (flowId: string, at = 1000): FlowRecord => ({
  flowId,
  name: 'f',
  state: 'RUNNING',
  definition: { flow: 'f', version: '1', tasks: [{ name: 'a', version: '1' }] },
  inputs: { x: 1, nested: { y: [true, null, 'z'] } },
  token: null,
  createdAt: at,
  updatedAt: at,
});

const codeOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return (e as RiggingError).code;
  }
  return 'resolved';
};

/** `sqlLog` on `fresh` (made for one suite), and how to close it and drop the database. */
export async function freshSqlLog(fresh: FreshDatabase) {
  const database = await openDatabase(fresh.url);
  return {
    log: await sqlLog(database),
    close: async () => {
      await database.close();
      await fresh.drop();
    },
  };
}

/** One conformance suite for every TaskLog backend. */
export function logConformance(
  name: string,
  open: () => Promise<{ log: TaskLog; close(): Promise<void> }>,
): void {
  describe(`task log conformance: ${name}`, () => {
    let log: TaskLog;
    let close: () => Promise<void>;
    beforeAll(async () => {
      ({ log, close } = await open());
    }, 60_000);
    afterAll(async () => {
      await close?.();
    });

    it('creates, loads and refuses a second create', async () => {
      await log.create(record('c1'), [{ seq: 1, task: null, state: 'RUNNING', at: 1000 }]);
      const loaded = await log.load('c1');
      expect(loaded?.record).toMatchObject({
        flowId: 'c1',
        name: 'f',
        state: 'RUNNING',
        inputs: record('c1').inputs,
      });
      expect(loaded?.record.definition).toEqual(record('c1').definition);
      expect(loaded?.entries).toMatchObject([{ seq: 1, task: null, state: 'RUNNING', at: 1000 }]);
      expect(await codeOf(log.create(record('c1'), []))).toBe('tasks.flow_exists');
      expect(await log.load('nope')).toBeUndefined();
      expect(await log.history('nope')).toEqual([]);
    });

    it('appends entries in order with results, failures and flow state', async () => {
      await log.create(record('a1'), []);
      const failure = { name: 'Error', message: 'boom', task: 'b' };
      await log.append('a1', [{ seq: 1, task: 'a', state: 'RUNNING', attempt: 1, at: 1001 }], {});
      await log.append(
        'a1',
        [{ seq: 2, task: 'a', state: 'SUCCESS', attempt: 1, result: { ok: [1, 'two'] }, at: 1002 }],
        {},
      );
      await log.append(
        'a1',
        [{ seq: 3, task: 'b', state: 'FAILURE', attempt: 1, failure, at: 1003 }],
        {},
      );
      await log.append('a1', [{ seq: 4, task: null, state: 'REVERTING', failure, at: 1004 }], {
        state: 'REVERTING',
      });
      await log.append('a1', [{ seq: 5, task: 'x', state: 'SUCCESS', result: null, at: 1005 }], {});
      const h = await log.history('a1');
      expect(h.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
      expect(h[1]).toMatchObject({
        task: 'a',
        state: 'SUCCESS',
        attempt: 1,
        result: { ok: [1, 'two'] },
      });
      expect(h[2]?.failure).toEqual(failure);
      expect(h[4]?.result).toBeNull();
      const loaded = await log.load('a1');
      expect(loaded?.record.state).toBe('REVERTING');
      expect(loaded?.record.updatedAt).toBeGreaterThanOrEqual(1004);
      expect(await codeOf(log.append('missing', [], {}))).toBe('tasks.flow_not_found');
    });

    it('keeps sub-flow entries (flow-level retry attempts) apart from task entries, two per append', async () => {
      await log.create(record('s1'), []);
      const failure = { name: 'Error', message: 'boom', task: 'd' };
      await log.append(
        's1',
        [
          { seq: 1, task: 'd', state: 'RETRYING', attempt: 1, failure, at: 1 },
          { seq: 2, task: 'inner', subflow: true, state: 'RETRYING', attempt: 1, failure, at: 1 },
        ],
        {},
      );
      await log.append(
        's1',
        [{ seq: 3, task: 'inner', subflow: true, state: 'RUNNING', attempt: 2, at: 2 }],
        {},
      );
      const h = await log.history('s1');
      expect(h.map((e) => [e.task, e.state, e.attempt, e.subflow])).toEqual([
        ['d', 'RETRYING', 1, undefined],
        ['inner', 'RETRYING', 1, true],
        ['inner', 'RUNNING', 2, true],
      ]);
      expect(h[1]?.failure).toEqual(failure);
    });

    it('refuses stale fencing tokens and taken log positions', async () => {
      await log.create(record('t1'), []);
      await log.append('t1', [{ seq: 1, task: 'a', state: 'RUNNING', at: 1, token: 5n }], {
        token: 5n,
      });
      expect((await log.load('t1'))?.record.token).toBe(5n);
      expect(
        await codeOf(
          log.append('t1', [{ seq: 2, task: 'a', state: 'SUCCESS', at: 2, token: 3n }], {
            token: 3n,
          }),
        ),
      ).toBe('tasks.fenced');
      await log.append('t1', [{ seq: 2, task: 'a', state: 'SUCCESS', at: 2, token: 5n }], {
        token: 5n,
      });
      await log.append(
        't1',
        [{ seq: 3, task: 'b', state: 'RUNNING', at: 3, token: 9007199254740993n }],
        {
          token: 9007199254740993n,
        },
      );
      expect(
        await codeOf(
          log.append('t1', [{ seq: 4, task: 'b', state: 'SUCCESS', at: 4, token: 5n }], {
            token: 5n,
          }),
        ),
      ).toBe('tasks.fenced');
      expect(
        await codeOf(log.append('t1', [{ seq: 3, task: 'b', state: 'SUCCESS', at: 4 }], {})),
      ).toBe('tasks.fenced');
      const h = await log.history('t1');
      expect(h.map((e) => [e.seq, e.token])).toEqual([
        [1, 5n],
        [2, 5n],
        [3, 9007199254740993n],
      ]);
    });

    it('lists flows by state, newest first, and removes them', async () => {
      await log.create({ ...record('l1', 5000), name: 'list' }, []);
      await log.create({ ...record('l2', 6000), name: 'list' }, []);
      await log.append('l1', [{ seq: 1, task: null, state: 'SUCCESS', at: 7000 }], {
        state: 'SUCCESS',
      });
      const ok = await log.flows({ states: ['SUCCESS'] });
      expect(ok.map((f) => f.flowId)).toEqual(['l1']);
      const all = await log.flows({ limit: 2 });
      expect(all.map((f) => f.flowId)).toEqual(['l2', 'l1']);
      await log.remove('l1');
      expect(await log.load('l1')).toBeUndefined();
      expect(await log.history('l1')).toEqual([]);
    });

    it('lets another engine resume a flow whose engine vanished, mid-run and mid-revert', async () => {
      const ran: string[] = [];
      const hang = new Set<string>();
      const make = (name: string, fail = false) =>
        task({
          name,
          provides: name,
          execute: () => {
            ran.push(`exec ${name}`);
            if (hang.has(`exec ${name}`)) return new Promise<string>(() => {});
            if (fail) throw new Error(`${name} failed`);
            return `${name}!`;
          },
          revert: (_ctx, { result, failure }) => {
            ran.push(`revert ${name} ${String(result)} ${failure?.message ?? ''}`);
            if (hang.has(`revert ${name}`)) return new Promise(() => {});
          },
        });
      // Mid-run: 'c' never finishes in the first engine.
      const flow = linearFlow('resumable', make('a'), make('b'), make('c'), make('d'));
      hang.add('exec c');
      void new Engine({ log }).run(flow, { inputs: {}, flowId: 'r1' });
      await expect.poll(() => ran.includes('exec c')).toBe(true);
      hang.clear();
      ran.length = 0;
      expect(await new Engine({ log }).resume('r1', flow)).toEqual({
        a: 'a!',
        b: 'b!',
        c: 'c!',
        d: 'd!',
      });
      expect(ran).toEqual(['exec c', 'exec d']);
      expect(await new Engine({ log }).resume('r1', flow)).toEqual({
        a: 'a!',
        b: 'b!',
        c: 'c!',
        d: 'd!',
      });

      // Mid-revert: 'd' fails, the revert of 'b' never finishes in the first engine.
      const failing = linearFlow('resumable', make('a'), make('b'), make('c'), make('d', true));
      ran.length = 0;
      hang.add('revert b');
      void new Engine({ log }).run(failing, { inputs: {}, flowId: 'r2' }).catch(() => {});
      await expect.poll(() => ran.some((r) => r.startsWith('revert b'))).toBe(true);
      hang.clear();
      ran.length = 0;
      const err = (await new Engine({ log })
        .resume('r2', failing)
        .catch((e: unknown) => e)) as FlowFailed;
      expect(err).toBeInstanceOf(FlowFailed);
      expect(err.code).toBe('tasks.flow_failed');
      expect(ran).toEqual(['revert b b! d failed', 'revert a a! d failed']);
      expect(err.reverts.map((r) => r.task)).toEqual(['c', 'b', 'a']);
      expect((await log.load('r2'))?.record.state).toBe('REVERTED');
    });
  });
}
