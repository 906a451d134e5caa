import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // CI runs several suites at once on 2 cores; process and database tests need headroom.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    expect: { poll: { timeout: 20_000 } },
    include: ['test/**/*.test.ts'],
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
