import { defineConfig } from 'tsup';
import { packageBuild } from '../../config/tsup.base';

export default defineConfig({
  ...packageBuild,
  entry: { index: 'src/index.ts', sql: 'src/sql/index.ts', http: 'src/http/index.ts' },
});
