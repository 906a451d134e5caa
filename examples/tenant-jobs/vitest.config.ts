import { defineConfig } from 'vitest/config';
import { packageTests, sourceResolve } from '../../config/vitest.base';

export default defineConfig({ ...sourceResolve, test: packageTests });
