import { defineConfig } from 'vitest/config';
import { packageTests, sourceResolve } from '../../config/vitest.base';

// Examples import the package by name: the source condition resolves that to `src/` too.
export default defineConfig({ ...sourceResolve, test: packageTests });
