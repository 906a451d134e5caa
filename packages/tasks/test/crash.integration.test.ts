import { afterAll, beforeAll, describe } from 'vitest';
import { freshDatabase, service, type FreshDatabase } from '@rigging/testkit';
import { crashSuite } from './crash-suite.js';

const pg = await service('postgres');

describe.skipIf(!pg.available)('crash and resume with real processes: PostgreSQL', () => {
  let fresh: FreshDatabase;
  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'tasks_crash');
  });
  afterAll(() => fresh.drop());
  crashSuite(() => fresh.url, 'postgres');
});
