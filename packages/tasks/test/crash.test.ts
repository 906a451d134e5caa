import { afterAll, beforeAll, describe } from 'vitest';
import { freshDatabase, type FreshDatabase } from '@rigging/testkit';
import { crashSuite } from './crash-suite.js';

describe('crash and resume with real processes: SQLite', () => {
  let fresh: FreshDatabase;
  beforeAll(async () => {
    fresh = await freshDatabase('sqlite-file', 'tasks_crash');
  });
  afterAll(() => fresh.drop());
  crashSuite(() => fresh.url, 'sqlite');
});
