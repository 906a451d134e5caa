import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts', 'src/sql.ts'],
  format: ['esm'],
  target: 'node20',
  dts: true,
  sourcemap: true,
  clean: true,
});
