// Packs every published package with `pnpm pack` (which turns `workspace:` ranges into the
// versions being released), puts the README in its published form (scripts/readme-links.mjs: a
// relative link to a file that does not ship points at the repository), and checks that each
// tarball ships what a user needs: LICENSE, README.md, CHANGELOG.md, the `types` and JavaScript
// file of every `exports` entry, and a README whose relative links all resolve inside it.
// `node scripts/pack-all.mjs [dir]` packs into `dir` (by default a temporary directory, removed
// afterwards), prints one line per tarball and exits non-zero on any problem (part of `pnpm lint`,
// after the build); the à-la-carte test imports it.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { danglingLinks, publishedReadme } from './readme-links.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The published packages of the workspace: `{ name, dir, manifest }`, in directory order. */
export function publishedPackages() {
  return readdirSync(join(root, 'packages'))
    .map((name) => join(root, 'packages', name))
    .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) }))
    .filter(({ manifest }) => !manifest.private)
    .map(({ dir, manifest }) => ({ name: manifest.name, dir, manifest }));
}

// The workspace's own export condition: it maps an entry to its TypeScript source for the
// repository's tests (see config/vitest.base.ts) and resolves only for whoever asks for it by
// name; the sources do not ship, so it is no target a tarball must hold.
const SOURCE_CONDITION = '@rigging/source';

/** The files an `exports` target points to, conditions nested or not, the source one aside. */
function exportPaths(target) {
  if (typeof target === 'string') return [target];
  return Object.entries(target ?? {}).flatMap(([condition, value]) =>
    condition === SOURCE_CONDITION ? [] : exportPaths(value),
  );
}

/**
 * What a tarball lacks, given the manifest it was packed from, the paths it holds and its
 * README's text.
 */
export function tarballProblems(manifest, files, readme = '') {
  const have = new Set(files);
  const problems = [];
  for (const file of ['LICENSE', 'README.md', 'CHANGELOG.md', 'package.json']) {
    if (!have.has(file)) problems.push(`lacks ${file}`);
  }
  for (const [entry, target] of Object.entries(manifest.exports ?? {})) {
    const paths = exportPaths(target);
    if (typeof target !== 'string' && !target.types?.endsWith('.d.ts')) {
      problems.push(`exports["${entry}"] has no .d.ts types`);
    }
    for (const path of paths) {
      if (!have.has(path.replace(/^\.\//, '')))
        problems.push(`lacks ${path} (exports["${entry}"])`);
    }
  }
  for (const target of danglingLinks(readme, files)) {
    problems.push(`README.md links to ${target}, which is not in the tarball`);
  }
  return problems;
}

/** Rewrites the README inside a packed tarball into its published form; returns its text. */
function publishReadmeIn(tarball, dir, manifest) {
  const unpacked = mkdtempSync(join(tmpdir(), 'rigging-readme-'));
  try {
    execFileSync('tar', ['-xzf', tarball, '-C', unpacked]);
    const file = join(unpacked, 'package', 'README.md');
    const text = publishedReadme(readFileSync(file, 'utf8'), dir, manifest);
    writeFileSync(file, text);
    execFileSync('tar', ['-czf', tarball, '-C', unpacked, 'package']);
    return text;
  } finally {
    rmSync(unpacked, { recursive: true, force: true });
  }
}

/**
 * Packs every published package into `destination`. Returns, per package, its name, version,
 * tarball path, the packed manifest (real version ranges) and the problems found in it.
 */
export function packAll(destination) {
  return publishedPackages().map(({ dir }) => {
    const output = execFileSync('pnpm', ['pack', '--json', '--pack-destination', destination], {
      cwd: dir,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const packed = JSON.parse(output);
    const manifest = JSON.parse(
      execFileSync('tar', ['-xzOf', packed.filename, 'package/package.json'], { encoding: 'utf8' }),
    );
    const readme = publishReadmeIn(packed.filename, dir, manifest);
    const problems = tarballProblems(
      manifest,
      packed.files.map((file) => file.path),
      readme,
    );
    if (JSON.stringify(manifest).includes('workspace:')) problems.push('keeps a workspace: range');
    return {
      name: packed.name,
      version: packed.version,
      tarball: packed.filename,
      manifest,
      problems,
    };
  });
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  // Without a directory, the tarballs go to a temporary one that is removed afterwards.
  const keep = process.argv[2] !== undefined;
  const destination = resolve(process.argv[2] ?? mkdtempSync(join(tmpdir(), 'rigging-pack-')));
  let failed = false;
  try {
    for (const { name, version, tarball, problems } of packAll(destination)) {
      const where = keep ? `: ${tarball}` : '';
      console.log(
        `${name}@${version}${where}${problems.length ? ` — ${problems.join('; ')}` : ''}`,
      );
      failed ||= problems.length > 0;
    }
  } finally {
    if (!keep) rmSync(destination, { recursive: true, force: true });
  }
  if (failed) process.exit(1);
}
