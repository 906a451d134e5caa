import { strykerConfig } from '../../config/stryker.base.mjs';

// Capacity and generation checks (`engine.ts`'s plan, `model.ts`'s normalization and capacity,
// `store.ts`'s dry-run report). The tests are the in-memory ones: the store conformance suite on
// the memory store, the plan on hand-built snapshots, the candidates and provider-tree tests, and
// the HTTP API over a memory store in the test process. The SQL, peer and concurrency suites need
// their databases or processes and cost minutes per mutant; add them for scoped runs of `src/sql/`.
export default strykerConfig({
  mutate: ['src/engine.ts', 'src/model.ts', 'src/store.ts'],
  tests: [
    'test/memory.test.ts',
    'test/engine.test.ts',
    'test/candidates.test.ts',
    'test/tree.test.ts',
    'test/http.test.ts',
    'test/http-gabbi.test.ts',
    'test/http-providers.test.ts',
  ],
});
