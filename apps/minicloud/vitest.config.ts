import { defineConfig } from 'vitest/config';
import { packageTests } from '../../config/vitest.base';

export default defineConfig({
  // CLI tests spawn node processes; on a loaded 2-core CI machine one can take over 5 s.
  test: { ...packageTests, testTimeout: 60_000, hookTimeout: 120_000 },
});
