import { openDatabase } from '@rigging/sql';
import { freshDatabase } from '@rigging/testkit';
import { memoryLog } from '../src/index.js';
import { sqlLog } from '../src/sql.js';
import { logConformance } from './log-conformance.js';

logConformance('memory', async () => ({ log: memoryLog(), close: async () => {} }));

for (const kind of ['sqlite-memory', 'sqlite-file'] as const) {
  logConformance(kind, async () => {
    const fresh = await freshDatabase(kind, 'tasks_log');
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
