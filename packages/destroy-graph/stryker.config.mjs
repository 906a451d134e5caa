import { strykerConfig } from '../../config/stryker.base.mjs';

// The layering: strongly connected components, layers and the spec's comparator
// (test/layering.test.ts checks whole plans against a naive model of the definition).
export default strykerConfig({
  mutate: ['src/layering.ts'],
  tests: [
    'test/layering.test.ts',
    'test/plan.test.ts',
    'test/properties.test.ts',
    'test/scenarios.test.ts',
  ],
});
