import { strykerConfig } from '../../config/stryker.base.mjs';

// Integrity and the checks on extracted entries, against the tests that exercise them directly
// (`test/entry-checks.test.ts`: which paths and link targets are refused, which accepted; the
// cache's own end-to-end tests also catch some: add `test/cache.test.ts` for a full run).
export default strykerConfig({
  mutate: ['src/integrity.ts', 'src/entry-checks.ts', 'src/extract.ts'],
  tests: ['test/integrity.test.ts', 'test/entry-checks.test.ts', 'test/fetchers.test.ts'],
});
