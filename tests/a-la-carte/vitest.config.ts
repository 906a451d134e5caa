import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.mjs'],
    // npm installs into empty projects, one package after the other; the whole file stays within
    // a few minutes (see the deadline in the test).
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
