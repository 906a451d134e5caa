import { strykerConfig } from '../../config/stryker.base.mjs';

// Authentication: tokens, roles and the limiter. Only tests that import `src/` can kill a
// mutant: test/auth.test.ts drives the built `dist/cli.js`, which the in-place mutants of `src/`
// never reach.
export default strykerConfig({
  mutate: ['src/auth/**/*.ts'],
  tests: ['test/auth-store.test.ts'],
});
