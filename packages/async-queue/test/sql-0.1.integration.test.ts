// The SQL backend with `@rigging/sql` 0.1, which has no `prepareQuery`: the peer is mocked without
// it, and the backend then builds each statement on every call; the conformance suite must hold
// all the same (SQLite's statements are builders, PostgreSQL's `sql` templates).
import { openDatabase, type Database } from '@rigging/sql';
import { sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as peer from '../src/sql-peer.js';
import { sqlBackend } from '../src/sql.js';
import { conformance } from './conformance.js';

// (Vitest's mocks refuse to read an export they do not define: this one is there, undefined.)
vi.mock('@rigging/sql', async (original) => ({
  ...(await original<typeof import('@rigging/sql')>()),
  prepareQuery: undefined,
}));

it('runs against a peer without prepareQuery', async () => {
  expect((await import('@rigging/sql')).prepareQuery).toBeUndefined();
  expect(typeof peer.prepareQuery).toBe('function');
});

const backends = await sqlBackends('async_queue_sql01', ['sqlite-file', 'postgres']);
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
    conformance(`sql ${b.kind}, @rigging/sql 0.1`, async () =>
      sqlBackend(database, { name: `q${++n}`, pollMs: 50 }),
    );
  });
}
