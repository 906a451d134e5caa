import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The machine running CI is shared; generous timeouts, behaviour is what is asserted.
    testTimeout: 30_000,
    hookTimeout: 90_000,
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
