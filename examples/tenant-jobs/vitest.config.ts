import { defineConfig } from 'vitest/config';
import { packageTests } from '../../config/vitest.base';

export default defineConfig({ test: packageTests });
