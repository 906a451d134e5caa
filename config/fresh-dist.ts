// Vitest `globalSetup` for packages whose tests run built files: fails the run before any test
// when a `dist/` (the package's own or a workspace dependency's, which the built files import at
// run time) is older than the sources it is built from.
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Directories a package builds from (tsup entries live under them). */
const SOURCE_DIRS = ['src', 'cluster'];

interface Manifest {
  name: string;
  scripts?: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

function newestMtime(dir: string): { ms: number; file: string } {
  let best = { ms: 0, file: dir };
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const file = join(entry.parentPath, entry.name);
    const ms = statSync(file).mtimeMs;
    if (ms > best.ms) best = { ms, file };
  }
  return best;
}

/** Workspace packages `dir` depends on (transitively), itself included. */
function workspaceClosure(dir: string, seen = new Map<string, string>()): Map<string, string> {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
  if (seen.has(manifest.name)) return seen;
  seen.set(manifest.name, dir);
  const deps = {
    ...manifest.peerDependencies,
    ...manifest.devDependencies,
    ...manifest.dependencies,
  };
  for (const [name, range] of Object.entries(deps)) {
    if (!range.startsWith('workspace:')) continue;
    const linked = join(dir, 'node_modules', name);
    if (existsSync(linked)) workspaceClosure(realpathSync(linked), seen);
  }
  return seen;
}

/** Why each built package in `dir`'s workspace closure is stale; empty when all are fresh. */
export function staleBuilds(dir: string): string[] {
  const stale: string[] = [];
  for (const [name, pkg] of workspaceClosure(dir)) {
    const manifest = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')) as Manifest;
    if (manifest.scripts?.build === undefined) continue; // source-only (testkit)
    const dist = join(pkg, 'dist');
    const built = existsSync(dist)
      ? readdirSync(dist)
          .filter((f) => f.endsWith('.js'))
          .map((f) => statSync(join(dist, f)).mtimeMs)
      : [];
    if (built.length === 0) {
      stale.push(`${name}: no dist/`);
      continue;
    }
    const oldestBuild = Math.min(...built);
    for (const sub of SOURCE_DIRS) {
      if (!existsSync(join(pkg, sub))) continue;
      const newest = newestMtime(join(pkg, sub));
      if (newest.ms > oldestBuild) {
        stale.push(`${name}: ${relative(pkg, newest.file)} is newer than dist/`);
        break;
      }
    }
  }
  return stale;
}

export default function setup(project?: { config?: { root?: string } }): void {
  const root = project?.config?.root ?? process.cwd();
  const stale = staleBuilds(root);
  if (stale.length === 0) return;
  const name = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Manifest).name;
  throw new Error(
    `These tests run built files, and the build is older than the sources:\n  ${stale.join('\n  ')}\n` +
      `Rebuild first: pnpm exec turbo run build --filter=${name}... (turbo rebuilds only what changed)`,
  );
}
