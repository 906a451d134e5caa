import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.mjs'],
    // npm and pnpm install into empty projects, one package after the other; the whole file stays
    // within its deadline (see the test): 5 to 15 minutes per Node on a 2-core machine, quiet or
    // loaded.
    testTimeout: 300_000,
    hookTimeout: 300_000,
  },
});
