import { freshDatabase } from '@rigging/testkit';
import { memoryLog } from '../src/index.js';
import { freshSqlLog, logConformance } from './log-conformance.js';

logConformance('memory', async () => ({ log: memoryLog(), close: async () => {} }));

for (const kind of ['sqlite-memory', 'sqlite-file'] as const) {
  logConformance(kind, async () => freshSqlLog(await freshDatabase(kind, 'tasks_log')));
}
