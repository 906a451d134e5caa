import { strykerConfig } from '../../config/stryker.base.mjs';

// Running, reverting and resuming flows.
export default strykerConfig({
  mutate: ['src/flow-run.ts', 'src/run-revert.ts', 'src/run-journal.ts', 'src/run-attempts.ts'],
});
