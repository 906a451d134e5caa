import { strykerConfig } from '../../config/stryker.base.mjs';

// Running, reverting and resuming flows.
// The tests are the in-memory ones that run, revert and resume flows (no processes, no database
// servers: the crash and SQL suites cost minutes per mutant on two shared cores; the transactional
// attempt runs on the SQL log over an in-memory SQLite database).
export default strykerConfig({
  mutate: [
    'src/flow-run.ts',
    'src/run-revert.ts',
    'src/run-journal.ts',
    'src/run-attempts.ts',
    'src/recovery.ts',
  ],
  tests: [
    'test/engine.test.ts',
    'test/revert-order.test.ts',
    'test/property.test.ts',
    'test/run-or-resume.test.ts',
    'test/recovery.test.ts',
    'test/ownership.test.ts',
    'test/upgrade.test.ts',
    'test/sensitive.test.ts',
    'test/revert-guarantees.test.ts',
    'test/resume-journal.test.ts',
    'test/task-attempts.test.ts',
    'test/transaction-attempts.test.ts',
    'test/flow-run.test.ts',
  ],
});
