import { fileURLToPath } from 'node:url';
import type { ViteUserConfig } from 'vitest/config';

/**
 * The export condition every workspace package maps to its TypeScript sources
 * (`"@rigging/source": "./src/index.ts"` in each `exports` entry). Tests resolve it first, so
 * `@rigging/locks` imported from another package's test is the current `src/`, never a stale
 * `dist/`. Child processes started with testkit's `spawnNode` pass it to Node as `--conditions`.
 */
export const SOURCE_CONDITION = '@rigging/source';

// Vite replaces its defaults when `conditions` is set: keep them after ours.
const conditions = [SOURCE_CONDITION, 'module', 'node', 'development|production'];

/** The test options every package shares (each `vitest.config.ts` spreads them into `test`). */
export const packageTests = {
  include: ['test/**/*.test.ts'],
  typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  // CI runs several suites at once on 2 cores; process and database tests need headroom.
  testTimeout: 30_000,
  hookTimeout: 60_000,
} satisfies ViteUserConfig['test'];

/** Resolution every package's `vitest.config.ts` spreads at the top level: workspace imports go to `src/`. */
export const sourceResolve = {
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: [SOURCE_CONDITION] } },
} satisfies ViteUserConfig;

/**
 * A `globalSetup` entry for packages whose tests run built files (`dist/cli.js` spawned as a
 * process, the package required by name from plain Node): the run fails at once, naming the
 * stale packages and the command that rebuilds them, when a `dist/` is older than its `src/`.
 */
export const freshDist = fileURLToPath(new URL('./fresh-dist.ts', import.meta.url));
