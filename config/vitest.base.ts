import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, type ViteUserConfig } from 'vitest/config';

/**
 * The export condition every workspace package maps to its TypeScript sources
 * (`"@rigging/source": { "import": "./src/index.ts" }` in each `exports` entry), so
 * `@rigging/locks` imported from another package's test is the current `src/`, never a stale
 * `dist/` (through {@link sourceResolve}'s aliases). Child processes started with testkit's
 * `spawnNode` pass it to Node as `--conditions` (tsx runs the TypeScript); it maps only `import`,
 * so a `require()` still gets `dist/`.
 */
export const SOURCE_CONDITION = '@rigging/source';

// `pnpm mutate` (StrykerJS) runs the suite once per mutant: only the test files its config names
// (`config/stryker.base.mjs` sets this), and no type tests.
const mutationTests = process.env.RIGGING_MUTATE_TESTS?.split(',');

// CI runs the test step again on Node 22 and 24 (`scripts/test-on-node.sh` sets this): there the
// type tests and the suites a package names in `nodeMatrixSkips` (what they prove does not
// depend on the Node version) run once, on the first Node.
const nodeMatrixRerun = process.env.RIGGING_NODE_MATRIX !== undefined;

/** The test options every package shares (each `vitest.config.ts` spreads them into `test`). */
export const packageTests = {
  include: mutationTests ?? ['test/**/*.test.ts'],
  typecheck: {
    enabled: mutationTests === undefined && !nodeMatrixRerun,
    include: ['test/**/*.test-d.ts'],
  },
  // CI runs several suites at once on 2 cores; process and database tests need headroom.
  testTimeout: 30_000,
  hookTimeout: 60_000,
} satisfies ViteUserConfig['test'];

/**
 * Test options that leave out, on CI's reruns on other Node majors, the suites whose evidence
 * lies outside Node: SQL semantics, a peer program (OpenStack Placement, its CLI), a browser.
 * Spread into `test` after {@link packageTests}; each file named is still run on the first Node.
 */
export function nodeMatrixSkips(files: readonly string[]): { exclude: string[] } {
  return { exclude: [...configDefaults.exclude, ...(nodeMatrixRerun ? files : [])] };
}

/**
 * `@rigging/<pkg>` and `@rigging/<pkg>/<entry>` → that entry's TypeScript source, read from the
 * `@rigging/source` condition of each workspace package's `exports`. Aliases, not Vite
 * `conditions`: Vitest hands those to its workers as Node `--conditions`, and plain Node (which
 * loads the optional peers with `require`) cannot run TypeScript.
 */
function sourceAliases(): { find: RegExp; replacement: string }[] {
  const packages = fileURLToPath(new URL('../packages/', import.meta.url));
  const aliases: { find: RegExp; replacement: string }[] = [];
  for (const dir of readdirSync(packages)) {
    const file = join(packages, dir, 'package.json');
    if (!existsSync(file)) continue;
    const manifest = JSON.parse(readFileSync(file, 'utf8')) as {
      name: string;
      exports?: Record<string, unknown>;
    };
    for (const [entry, target] of Object.entries(manifest.exports ?? {})) {
      const source = (target as { [SOURCE_CONDITION]?: { import?: string } } | null)?.[
        SOURCE_CONDITION
      ]?.import;
      if (typeof source !== 'string') continue;
      const specifier = manifest.name + entry.slice(1);
      aliases.push({
        find: new RegExp(`^${specifier.replace(/[/.]/g, '\\$&')}$`),
        replacement: join(packages, dir, source),
      });
    }
  }
  return aliases;
}

/** Resolution every package's `vitest.config.ts` spreads at the top level: workspace imports go to `src/`. */
export const sourceResolve = {
  resolve: { alias: sourceAliases() },
} satisfies ViteUserConfig;

/**
 * A `globalSetup` entry for packages whose tests run built files (`dist/cli.js` spawned as a
 * process, the package required by name from plain Node): the run fails at once, naming the
 * stale packages and the command that rebuilds them, when a `dist/` is older than its `src/`.
 */
export const freshDist = fileURLToPath(new URL('./fresh-dist.ts', import.meta.url));
