import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deferred, RiggingError } from '@rigging/core';
import { sqlLockProvider } from '@rigging/locks/sql';
import { openDatabase, type Database } from '@rigging/sql';
import { freshDatabase, type FreshDatabase } from '@rigging/testkit';
import { Engine, linearFlow, memoryLog, task, type TaskLease, type TaskLog } from '../src/index.js';
import { sqlLog } from '../src/sql.js';
import { testLocks } from './helpers.js';

/** A flow whose tasks record the lease their context shows. */
function leaseSpy(hold?: Promise<void>) {
  const seen: { task: string; lease: TaskLease | undefined }[] = [];
  const started = deferred<void>();
  const step = (name: string, wait = false) =>
    task({
      name,
      execute: async (ctx) => {
        seen.push({ task: name, lease: ctx.lease });
        if (wait && hold && seen.filter((s) => s.task === name).length === 1) {
          started.resolve();
          await hold;
        }
        return ctx.lease === undefined ? null : String(ctx.lease.token);
      },
    });
  return { seen, started, flow: linearFlow('fenced', step('a'), step('b', true), step('c')) };
}

describe('the lease in a task context', () => {
  it('is undefined when the engine has no locks', async () => {
    const { seen, flow } = leaseSpy();
    await new Engine().run(flow, { inputs: {} });
    expect(seen.map((s) => s.lease)).toEqual([undefined, undefined, undefined]);
  });

  it('[memory] carries the fencing token the log records, and its lost signal; a successor sees a higher token', async () => {
    const log = memoryLog();
    const locks = testLocks();
    const gate = deferred<void>();
    const { seen, started, flow } = leaseSpy(gate.promise);
    const first = new Engine({ log, locks: locks.provider });
    const running = first.run(flow, { inputs: {}, flowId: 'fence' }).catch((e: unknown) => e);
    await started.promise;
    const firstLease = seen[0]!.lease!;
    expect(firstLease.key).toBe('rigging-tasks:fence');
    expect(typeof firstLease.token).toBe('bigint');
    expect(firstLease.lost.aborted).toBe(false);
    // Read-only: a task cannot release the engine's lease.
    expect(Object.keys(firstLease).sort()).toEqual(['key', 'lost', 'token']);
    expect(Object.isFrozen(firstLease)).toBe(true);

    locks.lose('rigging-tasks:fence');
    expect(seen[1]!.lease!.lost.aborted).toBe(true);
    await new Engine({ log, locks: locks.provider }).resume('fence', flow);
    gate.resolve();
    expect(RiggingError.hasCode(await running, 'tasks.ownership_lost')).toBe(true);

    const byTask = (name: string) => seen.filter((s) => s.task === name).map((s) => s.lease!);
    expect(byTask('a')).toHaveLength(1);
    const [bFirst, bSecond] = byTask('b');
    expect(bFirst!.token).toBe(firstLease.token);
    expect(bSecond!.token).toBeGreaterThan(firstLease.token);
    expect(byTask('c')[0]!.token).toBe(bSecond!.token);
    await expectTokensLogged(log, 'fence');
  });

  describe('[SQLite] with the SQL lock provider', () => {
    let fresh: FreshDatabase;
    let database: Database;
    beforeAll(async () => {
      fresh = await freshDatabase('sqlite-file', 'tasks_lease');
      database = await openDatabase(fresh.url);
    });
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    });

    it('carries the token of the lease the engine holds; the next owner sees a higher one', async () => {
      const log = await sqlLog(database);
      const locks = sqlLockProvider(database, { ttlMs: 5000 });
      try {
        const gate = deferred<void>();
        const { seen, started, flow } = leaseSpy(gate.promise);
        const first = new Engine({ log, locks });
        const running = first.run(flow, { inputs: {}, flowId: 'sqlite-fence' });
        const stopped = running.catch((e: unknown) => e);
        await started.promise;
        const suspending = first.suspend('sqlite-fence');
        gate.resolve();
        await suspending;
        expect(RiggingError.hasCode(await stopped, 'tasks.suspended')).toBe(true);
        const firstLease = seen[0]!.lease!;
        expect(firstLease.key).toBe('rigging-tasks:sqlite-fence');
        expect(firstLease.token).toBeGreaterThan(0n);
        expect(seen[1]!.lease!.token).toBe(firstLease.token);

        await new Engine({ log, locks }).resume('sqlite-fence', flow);
        const later = seen.slice(2).map((s) => s.lease!);
        expect(seen.slice(2).map((s) => s.task)).toEqual(['c']); // 'b' finished before the suspension
        for (const lease of later) {
          expect(lease.token).toBeGreaterThan(firstLease.token);
          expect(lease.lost.aborted).toBe(false);
        }
        await expectTokensLogged(log, 'sqlite-fence');
      } finally {
        await locks.close();
      }
    });
  });
});

/** Every task result (the token its context showed, as a string) is the token of its log entry. */
async function expectTokensLogged(log: TaskLog, flowId: string): Promise<void> {
  const history = await log.history(flowId);
  const successes = history.filter((e) => e.task !== null && e.state === 'SUCCESS');
  expect(successes.length).toBeGreaterThan(0);
  for (const e of successes) expect(e.result).toBe(String(e.token));
}
