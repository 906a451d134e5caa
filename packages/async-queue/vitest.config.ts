import { defineConfig } from 'vitest/config';
import { nodeMatrixSkips, packageTests, sourceResolve } from '../../config/vitest.base';

export default defineConfig({
  ...sourceResolve,
  test: {
    ...packageTests,
    // Two handles in one process: the SQL of sharing work and per-key order.
    ...nodeMatrixSkips(['test/jobboard.integration.test.ts']),
  },
});
