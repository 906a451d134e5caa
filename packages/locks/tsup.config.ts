import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/index.ts', 'src/sql.ts', 'src/redis.ts'],
  format: ['esm'],
  target: 'node20',
  dts: true,
  sourcemap: true,
  clean: true,
});
