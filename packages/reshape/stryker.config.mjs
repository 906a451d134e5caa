import { strykerConfig } from '../../config/stryker.base.mjs';

// Capacity and generation checks.
export default strykerConfig({ mutate: ['src/engine.ts', 'src/model.ts', 'src/store.ts'] });
