import { afterAll, beforeAll, describe } from 'vitest';
import { freshDatabase, service, type FreshDatabase } from '@rigging/testkit';
import { recoverySuite } from './recovery-suite.js';

const pg = await service('postgres');

describe.skipIf(!pg.available)('automatic recovery after SIGKILL: PostgreSQL', () => {
  let fresh: FreshDatabase;
  beforeAll(async () => {
    fresh = await freshDatabase('postgres', 'tasks_recovery');
  });
  afterAll(() => fresh.drop());
  recoverySuite(() => fresh.url, 'postgres');
});
