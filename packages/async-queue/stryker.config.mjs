import { strykerConfig } from '../../config/stryker.base.mjs';

// Claims and per-key ordering (memory and SQL backends).
export default strykerConfig({
  mutate: ['src/memory.ts', 'src/worker.ts', 'src/sql/backend.ts', 'src/sql/store.ts'],
});
