// A migrated minicloud database of its own for a describe block, on one of the SQL backends.
import { openDatabase, type Database } from '@rigging/sql';
import type { SqlBackend } from '@rigging/testkit';
import { afterAll, beforeAll } from 'vitest';
import { migrations, NAMESPACE, type MinicloudTables } from '../src/migrations.js';

/**
 * Creates a fresh database on `backend` and migrates it before the block's tests, handing it to
 * `opened`; closes and drops it after them.
 */
export function freshMinicloudDatabase(
  backend: SqlBackend,
  opened: (database: Database<MinicloudTables>) => void,
): void {
  let database: Database<MinicloudTables> | undefined;
  let drop: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    const fresh = await backend.create();
    drop = () => fresh.drop();
    database = await openDatabase<MinicloudTables>(fresh.url);
    await database.migrate(NAMESPACE, migrations);
    opened(database);
  }, 60_000);
  afterAll(async () => {
    await database?.close();
    await drop?.();
  });
}
