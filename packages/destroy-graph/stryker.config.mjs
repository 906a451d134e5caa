import { strykerConfig } from '../../config/stryker.base.mjs';

// The layering: strongly connected components, layers and the spec's comparator.
export default strykerConfig({
  mutate: ['src/layering.ts'],
  tests: ['test/plan.test.ts', 'test/properties.test.ts', 'test/scenarios.test.ts'],
});
