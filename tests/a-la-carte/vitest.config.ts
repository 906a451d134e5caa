import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.mjs'],
    // npm and pnpm install into empty projects, one package after the other; the whole file stays
    // within its deadline (see the test): about 10 minutes on Node 20 on a loaded 2-core machine.
    testTimeout: 300_000,
    hookTimeout: 300_000,
  },
});
