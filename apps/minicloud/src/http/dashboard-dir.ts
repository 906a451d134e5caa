import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where the built dashboard (`vite build dashboard` → `apps/minicloud/dashboard/dist`) is, seen
 * from this module. Unbundled (tests, tsx) this file is `src/http/dashboard-dir.ts`; bundled by
 * tsup it is part of `dist/cli.js`: the two sit at different depths, so both candidates are
 * tried and the first one holding an `index.html` wins. `MINICLOUD_DASHBOARD_DIR` overrides.
 */
export function dashboardDistDir(
  env: NodeJS.ProcessEnv = process.env,
  from: string = import.meta.url,
): { dir: string; built: boolean } {
  if (env.MINICLOUD_DASHBOARD_DIR) {
    const dir = env.MINICLOUD_DASHBOARD_DIR;
    return { dir, built: existsSync(join(dir, 'index.html')) };
  }
  const candidates = ['../dashboard/dist/', '../../dashboard/dist/'].map((rel) =>
    fileURLToPath(new URL(rel, from)),
  );
  for (const dir of candidates) {
    if (existsSync(join(dir, 'index.html'))) return { dir, built: true };
  }
  return { dir: candidates[0]!, built: false };
}
