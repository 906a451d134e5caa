import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { freshDatabase, service, type FreshDatabase } from '@rigging/testkit';
import { Engine, linearFlow, task } from '../src/index.js';
import { sqlLog } from '../src/sql.js';

const pg = await service('postgres');

describe.skipIf(!pg.available)('runOrResume on PostgreSQL', () => {
  let fresh: FreshDatabase;
  let database: Database;
  let admin: Database;
  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'tasks_ror');
    database = await openDatabase(fresh.url);
    admin = await openDatabase(fresh.url);
  });
  afterAll(async () => {
    await database?.close();
    await admin?.close();
    await fresh?.drop();
  });

  it('resumes after the log loses its database connection mid-write, without re-running completed tasks', async () => {
    const log = await sqlLog(database);
    const engine = new Engine({ log });
    const runs: Record<string, number> = {};
    const locked = deferred<void>();
    const release = deferred<void>();
    let holding: Promise<unknown> | undefined;
    const step = (name: string, hold = false) =>
      task({
        name,
        provides: name,
        execute: async () => {
          runs[name] = (runs[name] ?? 0) + 1;
          if (hold && runs[name] === 1) {
            // Hold the flow's row so that the engine's next write blocks on it; the test then
            // terminates the engine's blocked session (a lost connection, mid-write).
            holding = admin.transaction(async (trx) => {
              await sql`select 1 from rigging_tasks_flows where flow_id = 'lost-conn' for update`.execute(
                trx,
              );
              locked.resolve();
              await release.promise;
            });
            await locked.promise;
          }
          return `${name}!`;
        },
      });
    const flow = linearFlow('conn', step('a'), step('b', true), step('c'));
    const running = engine.runOrResume(flow, { flowId: 'lost-conn', inputs: {}, pollMs: 20 });
    await locked.promise;
    let killed = 0;
    for (let i = 0; i < 200 && killed === 0; i++) {
      const r = await sql<{ n: number }>`
        select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`.execute(admin.db);
      killed = r.rows[0]!.n;
      if (killed === 0) await new Promise((r) => setTimeout(r, 10));
    }
    expect(killed).toBe(1);
    release.resolve();
    await holding;
    expect(await running).toEqual({ a: 'a!', b: 'b!', c: 'c!' });
    // 'b' ran again (its success was never written); 'a' was not.
    expect(runs).toEqual({ a: 1, b: 2, c: 1 });
    const history = await log.history('lost-conn');
    expect(history.filter((e) => e.task === 'a' && e.state === 'SUCCESS')).toHaveLength(1);
  });
});
