import { strykerConfig } from '../../config/stryker.base.mjs';

// Integrity and the checks on extracted entries.
export default strykerConfig({
  mutate: ['src/integrity.ts', 'src/entry-checks.ts', 'src/extract.ts'],
});
