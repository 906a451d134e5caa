import type { ViteUserConfig } from 'vitest/config';

/** The test options every package shares (each `vitest.config.ts` spreads them into `test`). */
export const packageTests = {
  include: ['test/**/*.test.ts'],
  typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  // CI runs several suites at once on 2 cores; process and database tests need headroom.
  testTimeout: 30_000,
  hookTimeout: 60_000,
} satisfies ViteUserConfig['test'];
