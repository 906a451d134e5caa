// flowHandler on @rigging/async-queue's SQL backend: SQLite, PostgreSQL and MariaDB, with the task
// log in the same database (the memory backend: flow-handler-queue.test.ts). PostgreSQL and
// MariaDB are skipped with a message when unreachable, and fail under CI=true.
import { sqlBackend } from '@rigging/async-queue/sql';
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe } from 'vitest';
import type { TaskLog } from '../src/index.js';
import { sqlLog } from '../src/sql.js';
import { flowHandlerOnQueue } from './flow-handler-queue-suite.js';

const backends = await sqlBackends('tasks_flow_queue', ['sqlite-file', 'postgres', 'mysql']);

for (const b of backends) {
  describe.skipIf(!b.available)(`flowHandler on the ${b.kind} queue backend`, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let log: TaskLog;
    beforeAll(async () => {
      fresh = await b.create();
      database = await openDatabase(fresh.url);
      log = await sqlLog(database);
    }, 60_000);
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    }, 60_000);
    flowHandlerOnQueue(() => ({
      log,
      queueBackend: (name) => sqlBackend(database, { name, pollMs: 25 }),
    }));
  });
}
