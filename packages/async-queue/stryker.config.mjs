import { strykerConfig } from '../../config/stryker.base.mjs';

// Claims and per-key ordering (memory and SQL backends).
// The tests are the memory backend's (the conformance suite run on it, and its claims called
// directly); the SQL suites need their databases and minutes per mutant, add them for scoped
// runs of `src/sql/`.
export default strykerConfig({
  mutate: ['src/memory.ts', 'src/worker.ts', 'src/sql/backend.ts', 'src/sql/store.ts'],
  tests: ['test/memory.test.ts', 'test/memory-claims.test.ts'],
});
