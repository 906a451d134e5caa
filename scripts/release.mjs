// Releases the published packages.
//   node scripts/release.mjs          (`pnpm release`)
//     1. Pending changesets: runs `changeset version` (versions, CHANGELOG entries, internal
//        ranges), prints what it did and stops: commit the result, then run `pnpm release` again,
//        so that what is published, and the git tags changesets adds, are a commit.
//     2. Refuses a tree with uncommitted changes.
//     3. `pnpm build`, `pnpm test`, then `changeset publish` with every README in its published
//        form (scripts/readme-links.mjs), with npm provenance when run in CI (CI=true).
//   node scripts/release.mjs --dry    (`pnpm release:dry`)
//     Prints the versions and CHANGELOG entries the pending changesets would give, computed by
//     `changeset version` on a copy of the manifests and changelogs: the tree is left as it is.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { publishedPackages } from './pack-all.mjs';
import { withPublishedReadmes } from './readme-links.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const changesetBin = join(root, 'node_modules', '.bin', 'changeset');

/** The pending changeset files (`.changeset/*.md` but its README). */
export function pendingChangesets(dir = root) {
  return readdirSync(join(dir, '.changeset')).filter(
    (file) => file.endsWith('.md') && file !== 'README.md',
  );
}

/** Runs a command in `cwd` with its output shown; throws when it fails. */
function run(command, args, { cwd = root, env = process.env } = {}) {
  const result = spawnSync(command, args, { cwd, env, stdio: 'inherit' });
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} failed (exit ${result.status ?? result.signal})`);
  }
}

/** `{ name: version }` of every workspace package (published or not) under `dir`. */
function versions(dir) {
  const found = {};
  for (const group of ['packages', 'apps']) {
    if (!existsSync(join(dir, group))) continue;
    for (const name of readdirSync(join(dir, group))) {
      const file = join(dir, group, name, 'package.json');
      if (!existsSync(file)) continue;
      const manifest = JSON.parse(readFileSync(file, 'utf8'));
      found[manifest.name] = { version: manifest.version, dir: join(group, name) };
    }
  }
  return found;
}

/**
 * What `changeset version` would do, computed on a copy: per package whose version changes, its
 * old and new version and the CHANGELOG text the release adds.
 */
export function releasePlan() {
  const copy = mkdtempSync(join(tmpdir(), 'rigging-release-plan-'));
  try {
    for (const file of ['package.json', 'pnpm-workspace.yaml', '.changeset']) {
      cpSync(join(root, file), join(copy, file), { recursive: true });
    }
    const before = versions(root);
    for (const { dir } of Object.values(before)) {
      for (const file of ['package.json', 'CHANGELOG.md']) {
        if (existsSync(join(root, dir, file))) {
          cpSync(join(root, dir, file), join(copy, dir, file), { recursive: true });
        }
      }
    }
    // The changelog generator is resolved from the copy.
    symlinkSync(join(root, 'node_modules'), join(copy, 'node_modules'), 'dir');
    execFileSync(changesetBin, ['version'], { cwd: copy, stdio: ['ignore', 'pipe', 'pipe'] });
    const after = versions(copy);
    return Object.entries(before)
      .filter(([name, { version }]) => after[name] && after[name].version !== version)
      .map(([name, { version, dir }]) => {
        const read = (base) =>
          existsSync(join(base, dir, 'CHANGELOG.md'))
            ? readFileSync(join(base, dir, 'CHANGELOG.md'), 'utf8')
            : '';
        const old = read(root).replace(/^# .*\n+/, '');
        const next = read(copy).replace(/^# .*\n+/, '');
        const entry = (old && next.endsWith(old) ? next.slice(0, -old.length) : next).trim();
        return { name, from: version, to: after[name].version, entry };
      });
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
}

function dry() {
  const pending = pendingChangesets();
  if (pending.length === 0) {
    console.log(
      'release:dry: no pending changeset; `pnpm release` would publish the current versions',
    );
    for (const { name, manifest } of publishedPackages())
      console.log(`  ${name}@${manifest.version}`);
    return;
  }
  const plan = releasePlan();
  const published = new Set(publishedPackages().map((p) => p.name));
  console.log(`release:dry: ${pending.length} pending changesets give these releases:\n`);
  for (const { name, from, to, entry } of plan) {
    if (!published.has(name)) continue;
    console.log(`${name}: ${from} → ${to}\n`);
    console.log(`${entry.replace(/^/gm, '    ')}\n`);
  }
}

async function release() {
  const pending = pendingChangesets();
  if (pending.length > 0) {
    console.log(`release: ${pending.length} pending changesets; running changeset version`);
    const before = versions(root);
    run(changesetBin, ['version']);
    for (const [name, { version }] of Object.entries(versions(root))) {
      if (before[name]?.version !== version)
        console.log(`  ${name}: ${before[name]?.version} → ${version}`);
    }
    console.log(
      '\nrelease: versions and CHANGELOGs are updated (see `git diff`). Commit them, then run\n' +
        '`pnpm release` again to build, test and publish that commit.',
    );
    process.exitCode = 1;
    return;
  }
  const dirty = execFileSync('git', ['status', '--porcelain'], { cwd: root, encoding: 'utf8' });
  if (dirty.trim() !== '') {
    console.error(`release: refusing to publish with uncommitted changes:\n${dirty}`);
    process.exitCode = 1;
    return;
  }
  run('pnpm', ['build']);
  run('pnpm', ['test']);
  const env = { ...process.env };
  if (process.env.CI === 'true') env.NPM_CONFIG_PROVENANCE = 'true';
  await withPublishedReadmes(publishedPackages(), () => run(changesetBin, ['publish'], { env }));
  console.log('release: published; push the tags changesets created: git push --follow-tags');
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--dry')) dry();
  else await release();
}
