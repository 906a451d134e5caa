import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // CLI tests spawn node processes; on a loaded 2-core CI machine one can take over 5 s.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
