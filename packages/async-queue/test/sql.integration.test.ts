import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe } from 'vitest';
import { sqlBackend } from '../src/sql.js';
import { conformance } from './conformance.js';

const backends = await sqlBackends('async_queue');

for (const b of backends) {
  describe.skipIf(!b.available)(b.kind, () => {
    let fresh: FreshDatabase;
    let database: Database;
    let n = 0;
    beforeAll(async () => {
      fresh = await b.create();
      database = await openDatabase(fresh.url);
    }, 60_000);
    afterAll(async () => {
      await database?.close();
      await fresh?.drop();
    }, 60_000);
    conformance(
      `sql ${b.kind}`,
      async () => sqlBackend(database, { name: `q${++n}`, pollMs: 50 }),
      { slow: true },
    );
  });
}
