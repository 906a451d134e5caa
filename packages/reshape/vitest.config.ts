import { defineConfig } from 'vitest/config';
import { nodeMatrixSkips, packageTests, sourceResolve } from '../../config/vitest.base';

export default defineConfig({
  ...sourceResolve,
  test: {
    ...packageTests,
    hookTimeout: 90_000,
    // Answers compared with OpenStack Placement and driven by its CLI: Python peers and SQL.
    ...nodeMatrixSkips([
      'test/candidates-differential.integration.test.ts',
      'test/osc.integration.test.ts',
      'test/peer.integration.test.ts',
    ]),
  },
});
