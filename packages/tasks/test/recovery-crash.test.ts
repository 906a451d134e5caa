import { afterAll, beforeAll, describe } from 'vitest';
import { freshDatabase, type FreshDatabase } from '@rigging/testkit';
import { recoverySuite } from './recovery-suite.js';

describe('automatic recovery after SIGKILL: SQLite file', () => {
  let fresh: FreshDatabase;
  beforeAll(async () => {
    fresh = await freshDatabase('sqlite-file', 'tasks_recovery');
  });
  afterAll(() => fresh.drop());
  recoverySuite(() => fresh.url, 'sqlite');
});
