import { strykerConfig } from '../../config/stryker.base.mjs';

// Integrity, the checks on extracted entries and the extraction itself, against the tests that
// exercise them (`test/entry-checks.test.ts`: which paths and link targets are refused, which
// accepted; `test/extract.test.ts`, `test/cache.test.ts`, `test/limits.test.ts` and
// `test/corrupt-archives.test.ts`: archives of every form installed or refused end to end,
// leaving nothing behind).
export default strykerConfig({
  mutate: ['src/integrity.ts', 'src/entry-checks.ts', 'src/extract.ts'],
  tests: [
    'test/integrity.test.ts',
    'test/entry-checks.test.ts',
    'test/fetchers.test.ts',
    'test/cache.test.ts',
    'test/limits.test.ts',
    'test/corrupt-archives.test.ts',
    'test/extract.test.ts',
  ],
});
