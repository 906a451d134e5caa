import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, describe } from 'vitest';
import { sqlStore } from '../src/sql/index.js';
import { candidateCases } from './candidates-cases.js';

const backends = await sqlBackends('reshape_candidates');

for (const backend of backends)
  describe.skipIf(!backend.available)(`candidates over ${backend.kind}`, () => {
    const opened: [FreshDatabase, Database][] = [];
    afterAll(async () => {
      for (const [fresh, database] of opened) {
        await database.close();
        await fresh.drop();
      }
    });
    candidateCases(backend.kind, async () => {
      const fresh = await backend.create();
      const database = await openDatabase(fresh.url);
      opened.push([fresh, database]);
      return sqlStore(database);
    });
  });
