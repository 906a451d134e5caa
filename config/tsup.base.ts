import type { Options } from 'tsup';

/** The build options every package shares (each package's `tsup.config.ts` adds its entries). */
export const packageBuild = {
  format: ['esm'],
  target: 'node20',
  dts: true,
  sourcemap: true,
  clean: true,
} satisfies Options;
