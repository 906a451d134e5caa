// The StrykerJS setup every package's `stryker.config.mjs` shares (`pnpm mutate` in a package).
// Not part of CI: a run takes minutes per module on two cores. Scores and the surviving mutants
// judged equivalent are recorded in the package's BENCHMARKS.md.

/**
 * @param {{ mutate: string[], tests?: string[], timeoutMs?: number }} options - `mutate`: the
 *   modules that carry the package's guarantees; `tests`: the test files that exercise them
 *   (globs relative to the package; every test file by default)
 * @returns {import('@stryker-mutator/api/core').PartialStrykerOptions}
 */
export function strykerConfig({ mutate, tests = ['test/**/*.test.ts'], timeoutMs = 30_000 }) {
  // Read by config/vitest.base.ts in the test runner processes (they inherit the environment).
  process.env.RIGGING_MUTATE_TESTS = tests.join(',');
  return {
    packageManager: 'pnpm',
    plugins: ['@stryker-mutator/vitest-runner', '@stryker-mutator/typescript-checker'],
    testRunner: 'vitest',
    vitest: { configFile: 'vitest.config.ts', related: true },
    checkers: ['typescript'],
    tsconfigFile: 'tsconfig.json',
    typescriptChecker: { prioritizePerformanceOverAccuracy: true },
    coverageAnalysis: 'perTest',
    mutate,
    // In place: the shared vitest/tsconfig bases are reached by relative paths a sandbox copy
    // would break. Stryker restores every file at the end (and after Ctrl-C).
    inPlace: true,
    // Re-runs only mutate what changed since the last run (tests or code).
    incremental: true,
    incrementalFile: 'reports/stryker-incremental.json',
    reporters: ['clear-text', 'progress', 'json'],
    jsonReporter: { fileName: 'reports/mutation.json' },
    clearTextReporter: {
      allowColor: false,
      logTests: false,
      reportMutants: true,
      reportScoreTable: true,
    },
    concurrency: 1,
    timeoutMS: timeoutMs,
    thresholds: { high: 90, low: 85, break: null },
    tempDirName: '.stryker-tmp',
    cleanTempDir: 'always',
  };
}
