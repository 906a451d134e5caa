import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { index: 'src/index.ts', sql: 'src/sql/index.ts', http: 'src/http/index.ts' },
  format: ['esm'],
  target: 'node20',
  dts: true,
  sourcemap: true,
  clean: true,
});
