import type { Options } from 'tsup';

/** The build options every package shares (each package's `tsup.config.ts` adds its entries). */
export const packageBuild = {
  format: ['esm'],
  target: 'node20',
  dts: true,
  sourcemap: true,
  clean: true,
  // classes keep their own names in the bundle (esbuild renames a class that refers to itself,
  // e.g. `class _RiggingError`, which util.inspect and `constructor.name` then print)
  keepNames: true,
} satisfies Options;
