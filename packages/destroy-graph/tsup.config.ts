import { defineConfig } from 'tsup';
import { packageBuild } from '../../config/tsup.base';

export default defineConfig({ ...packageBuild, entry: ['src/index.ts', 'src/tasks.ts'] });
