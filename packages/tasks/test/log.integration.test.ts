import { describe, it } from 'vitest';
import { sqlBackends } from '@rigging/testkit';
import { freshSqlLog, logConformance } from './log-conformance.js';

const backends = await sqlBackends('tasks_log', ['postgres', 'mysql']);
for (const backend of backends) {
  if (!backend.available) {
    describe.skip(`task log conformance: ${backend.kind} (service down)`, () =>
      it('skipped', () => {}));
    continue;
  }
  logConformance(backend.kind, async () => freshSqlLog(await backend.create()));
}
