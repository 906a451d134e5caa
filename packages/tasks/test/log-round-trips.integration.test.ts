// PostgreSQL: what a flow costs in round trips to the server, counted at the pg client. Each log
// write is one statement — a flow's creation with its first entries, and each append with its
// fenced flow update — so a flow of plain tasks takes one per commit and no BEGIN or COMMIT, and
// a task with `transaction: true` takes its own statements (the first carrying BEGIN, which
// `@rigging/sql` sends with it) and one log write, which carries the COMMIT.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, sql, type Database } from '@rigging/sql';
import {
  freshDatabase,
  recordPgRoundTrips,
  service,
  type FreshDatabase,
  type PgRoundTrips,
} from '@rigging/testkit';
import { Engine, linearFlow, task, type Task } from '../src/index.js';
import { sqlLog, sqlTransaction } from '../src/sql.js';

const status = await service('postgres');

interface Tables {
  trips_effects: { flow_id: string; task: string };
}

describe.skipIf(!status.available)('round trips of the task log (PostgreSQL)', () => {
  let fresh: FreshDatabase;
  let database: Database;
  let engine: Engine;
  let recorded: PgRoundTrips | undefined;

  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'tasks_trips');
    database = await openDatabase(fresh.url);
    await sql`create table trips_effects (flow_id text, task text)`.execute(database.db);
    engine = new Engine({ log: await sqlLog(database) });
    recorded = recordPgRoundTrips();
  }, 60_000);
  afterAll(async () => {
    recorded?.stop();
    await database?.close();
    await fresh?.drop();
  });

  /** The first word of each statement `run` sends. */
  const trips = (run: () => Promise<unknown>) => recorded!.of(run);

  const plain = (name: string): Task => task({ name, execute: async () => name }) as Task;
  const inserting = (name: string): Task =>
    task({
      name,
      transaction: true,
      execute: (ctx) =>
        sqlTransaction<Tables, string>(ctx, async (trx) => {
          await trx
            .insertInto('trips_effects')
            .values({ flow_id: ctx.flowId, task: name })
            .execute();
          return name;
        }),
    }) as Task;

  it('a flow of three plain tasks: four statements, each its own commit (created, then three appends)', async () => {
    const flow = linearFlow('plain', plain('a'), plain('b'), plain('c'));
    const sent = await trips(() => engine.run(flow, { inputs: {}, flowId: 'plain' }));
    expect(sent).toEqual(['with', 'with', 'with', 'with']);
    expect((await engine.history('plain')).length).toBe(8);
  });

  it('a flow of three transaction tasks: the task with BEGIN, the log write with COMMIT', async () => {
    const flow = linearFlow('tx', inserting('a'), inserting('b'), inserting('c'));
    const sent = await trips(() => engine.run(flow, { inputs: {}, flowId: 'tx' }));
    expect(sent).toEqual(Array.from({ length: 3 }, () => ['begin+insert', 'with+commit']).flat());
  });
});
