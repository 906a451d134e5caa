import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // Examples import the package by name; test them against the sources.
    alias: { '@rigging/destroy-graph': fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  test: {
    // CI runs several suites at once on 2 cores; process and database tests need headroom.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    include: ['test/**/*.test.ts'],
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
