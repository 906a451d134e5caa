import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { cli: 'src/cli.ts', cluster: 'cluster/main.ts' },
  format: ['esm'],
  target: 'node20',
  sourcemap: true,
  clean: true,
  banner: { js: '#!/usr/bin/env node' },
});
