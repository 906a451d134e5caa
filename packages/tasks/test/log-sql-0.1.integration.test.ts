// The task log with `@rigging/sql` 0.1, which has neither `withCommit` nor `prepareQuery`: the
// peer is mocked without them, and the log's PostgreSQL writes then run as statements of their
// own, built on every write; the conformance suite must hold all the same, and a task's
// transaction still commits its writes with its SUCCESS.
import { describe, expect, it, vi } from 'vitest';
import { openDatabase, sql } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import * as peer from '../src/sql-peer.js';
import { Engine, linearFlow, task } from '../src/index.js';
import { sqlLog, sqlTransaction } from '../src/sql.js';
import { freshSqlLog, logConformance } from './log-conformance.js';

// (Vitest's mocks refuse to read an export they do not define: these two are there, undefined.)
vi.mock('@rigging/sql', async (original) => ({
  ...(await original<typeof import('@rigging/sql')>()),
  withCommit: undefined,
  prepareQuery: undefined,
}));

it('runs against a peer without withCommit and prepareQuery', () => {
  expect(peer.withCommit).toBeUndefined();
  expect(typeof peer.prepareQuery).toBe('function');
});

const [backend] = await sqlBackends('tasks_log_sql01', ['postgres']);
if (!backend!.available) {
  describe.skip('task log conformance with @rigging/sql 0.1: postgres (service down)', () =>
    it('skipped', () => {}));
} else {
  logConformance('postgres, @rigging/sql 0.1', async () => freshSqlLog(await backend!.create()));

  it('commits a transaction task with its SUCCESS', async () => {
    const fresh = await backend!.create();
    const database = await openDatabase(fresh.url);
    try {
      await sql`create table tx01 (flow_id varchar(100), task varchar(100))`.execute(database.db);
      const engine = new Engine({ log: await sqlLog(database) });
      const insert = (name: string) =>
        task({
          name,
          transaction: true,
          execute: (ctx) =>
            sqlTransaction(ctx, async (trx) => {
              await sql`insert into tx01 values (${ctx.flowId}, ${name})`.execute(trx);
              return name;
            }),
        });
      await engine.run(linearFlow('tx01', insert('a'), insert('b')), { flowId: 'f1', inputs: {} });
      const { rows } = await sql<{ task: string }>`select task from tx01 order by task`.execute(
        database.db,
      );
      expect(rows.map((r) => r.task)).toEqual(['a', 'b']);
      expect((await engine.flows()).map((f) => f.state)).toEqual(['SUCCESS']);
    } finally {
      await database.close();
      await fresh.drop();
    }
  });
}
