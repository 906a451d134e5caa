import { defineConfig } from 'vitest/config';
import { nodeMatrixSkips, packageTests, sourceResolve } from '../../config/vitest.base';

export default defineConfig({
  ...sourceResolve,
  test: {
    ...packageTests,
    // The SQL of the lock tables in one process (processes and fencing run on every Node).
    ...nodeMatrixSkips(['test/sql.integration.test.ts']),
  },
});
