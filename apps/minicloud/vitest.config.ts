import { defineConfig } from 'vitest/config';
import { freshDist, nodeMatrixSkips, packageTests, sourceResolve } from '../../config/vitest.base';

// A mutation run (`pnpm mutate`, which sets RIGGING_MUTATE_TESTS) rewrites `src/` in place, so
// every `dist/` would look stale to the check below; it names only tests that import `src/`.
const mutationRun = process.env.RIGGING_MUTATE_TESTS !== undefined;

export default defineConfig({
  ...sourceResolve,
  // CLI tests spawn node processes; on a loaded 2-core CI machine one can take over 5 s.
  // Most test files spawn the built CLI (`dist/cli.js`): refuse to run them against a stale one.
  test: {
    ...packageTests,
    // A browser, the OpenStack CLI, and schema checks (Ajv, the OpenAPI document).
    ...nodeMatrixSkips([
      'test/dashboard*.e2e.test.ts',
      'test/osc.integration.test.ts',
      'test/fuzz.test.ts',
      'test/openapi*.test.ts',
    ]),
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: mutationRun ? [] : [freshDist],
  },
});
