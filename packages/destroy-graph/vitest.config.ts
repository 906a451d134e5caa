import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { packageTests } from '../../config/vitest.base';

export default defineConfig({
  resolve: {
    // Examples import the package by name; test them against the sources.
    alias: { '@rigging/destroy-graph': fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  test: packageTests,
});
