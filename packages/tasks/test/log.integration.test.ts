import { describe, it } from 'vitest';
import { openDatabase } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { sqlLog } from '../src/sql.js';
import { logConformance } from './log-conformance.js';

const backends = await sqlBackends('tasks_log', ['postgres', 'mysql']);
for (const backend of backends) {
  if (!backend.available) {
    describe.skip(`task log conformance: ${backend.kind} (service down)`, () =>
      it('skipped', () => {}));
    continue;
  }
  logConformance(backend.kind, async () => {
    const fresh = await backend.create();
    const database = await openDatabase(fresh.url);
    return {
      log: await sqlLog(database),
      close: async () => {
        await database.close();
        await fresh.drop();
      },
    };
  });
}
