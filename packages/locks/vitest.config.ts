import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // the machine running CI is shared: generous limits, behaviour is what is asserted
    testTimeout: 30_000,
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
