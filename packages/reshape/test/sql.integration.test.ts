import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { describe } from 'vitest';
import { sqlStore } from '../src/sql/index.js';
import { conformance } from './conformance/index.js';

const backends = await sqlBackends('reshape');

for (const backend of backends) {
  describe.skipIf(!backend.available)(`sqlStore on ${backend.kind}`, () => {
    let fresh: FreshDatabase | undefined;
    let database: Database | undefined;
    conformance(
      async (options) => {
        fresh ??= await backend.create();
        database ??= await openDatabase(fresh.url);
        return sqlStore(database, options);
      },
      async () => {
        await database?.close();
        await fresh?.drop();
      },
    );
  });
}
