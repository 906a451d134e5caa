// À la carte: every published package installs on its own, and the examples its README shows
// run as a user pastes them. Each package is packed as it will be published; its README is read
// from the tarball and every `<!-- example: … -->` block in it is run in an empty project outside
// the workspace, with what the README says to install and nothing else:
// - npm: the block saved as `.mts` and run with tsx (as the README says), and with its types
//   stripped as an `.mjs` run by plain `node` (no syntax the running Node cannot parse);
// - pnpm (strict: only declared dependencies resolve): the `.mjs` run by `node`;
// - esbuild: the block bundled for Node with everything but native addons, then run from a
//   directory whose node_modules holds only those addons.
// Every entry is also loaded from ESM and from CommonJS with nothing but the package installed.
// All three run on every Node the tests run on (20 here, 22 and 24 through
// scripts/test-on-node.sh); RIGGING_A_LA_CARTE=npm,pnpm,esbuild picks some.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSync, transformSync } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readmeExamples } from '../../../scripts/check-readme-examples.mjs';
import { packAll, publishedPackages } from '../../../scripts/pack-all.mjs';

const root = fileURLToPath(new URL('../../../', import.meta.url));
/** The SQLite driver, linked from the workspace where it is built for the running Node. */
const betterSqlite3 = join(
  fileURLToPath(new URL('..', import.meta.url)),
  'node_modules',
  'better-sqlite3',
);
const tsx = join(root, 'node_modules', 'tsx', 'dist', 'cli.mjs');
/** Native addons stay outside a bundle (a bundler cannot inline a `.node` file). */
const NATIVE = ['better-sqlite3', 'fs-native-extensions'];
/** Entries that import an optional peer of their package, and that peer. */
const ENTRY_PEERS = { './sql': '@rigging/sql', './tasks': '@rigging/tasks' };

const MODES = new Set((process.env.RIGGING_A_LA_CARTE ?? 'npm,pnpm,esbuild').split(','));

/** The whole file must finish within this (npm's and pnpm's caches make reruns faster). */
const DEADLINE_MS = 20 * 60_000;
const started = Date.now();
const work = mkdtempSync(join(tmpdir(), 'rigging-a-la-carte-'));
let packed = [];

beforeAll(() => {
  mkdirSync(join(work, 'tarballs'));
  packed = packAll(join(work, 'tarballs'));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * The environment of a user's shell: without what pnpm passes down to scripts (`npm_config_*`,
 * and a `NODE_PATH` through which the workspace's packages would resolve).
 */
const env = Object.fromEntries(
  Object.entries(process.env).filter(([key]) => !/^(npm_|pnpm_|NODE_PATH$)/i.test(key)),
);

/** Runs a package manager in `cwd`, throwing with its output when it fails. */
function run(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, env, encoding: 'utf8', timeout: 240_000 });
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`);
  }
}

/** Runs `node <args>` in `cwd`; returns its exit status and output. */
function node(args, cwd) {
  const result = spawnSync(process.execPath, args, { cwd, env, encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

const tarballOf = (name) => packed.find((p) => p.name === name);

/** The tarball of `name` and of every @rigging package it depends on, transitively. */
function closure(names) {
  const seen = new Set();
  const visit = (current) => {
    if (seen.has(current)) return;
    seen.add(current);
    for (const dependency of Object.keys(tarballOf(current).manifest.dependencies ?? {})) {
      if (tarballOf(dependency)) visit(dependency);
    }
  };
  for (const name of names) visit(name);
  return [...seen];
}

/** What to install for a package name a README tells the user to install. */
const spec = (name) =>
  tarballOf(name)?.tarball ?? (name === 'better-sqlite3' ? betterSqlite3 : name);

/** The packages a block imports (bare specifiers, `node:` built-ins left out). */
function importedPackages(code) {
  const names = new Set();
  for (const [, specifier] of code.matchAll(/^import\s[^'"]*?from\s+'([^']+)';/gms)) {
    if (specifier.startsWith('node:') || specifier.startsWith('.')) continue;
    const parts = specifier.split('/');
    names.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]);
  }
  return names;
}

/**
 * The README's install command for an example: the last `npm i…` in backticks between the
 * previous heading or example and the block, else the first `npm install` of the Install section.
 */
function installCommand(readme, file) {
  const at = readme.indexOf(`<!-- example: ${file} -->`);
  const before = readme.slice(0, at);
  const from = Math.max(before.lastIndexOf('\n#'), before.lastIndexOf('<!-- example:'));
  const commands = [...before.slice(from).matchAll(/`(npm i(?:nstall)? [^`]+)`/g)];
  const command =
    commands.at(-1)?.[1] ?? /^## Install\n+```sh\n(npm i(?:nstall)? [^\n#]+)/m.exec(readme)?.[1];
  return new Set(command?.trim().split(/\s+/).slice(2) ?? []);
}

/** An empty npm project outside the workspace with `names` installed, as a user would do. */
function npmProject(name, names) {
  const dir = mkdtempSync(join(work, `npm-${name.replace('@rigging/', '')}-`));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  npmInstall(dir, names);
  return dir;
}
function npmInstall(dir, names) {
  const args = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'];
  run('npm', [...args, ...names.map(spec)], dir);
}

/**
 * An empty pnpm project (strict: a package resolves only what it declares) with `names` as its
 * dependencies; every @rigging package, including the dependencies of those, comes from its
 * tarball (overrides), as it would from the registry after a release.
 */
function pnpmProject(name, names) {
  const dir = mkdtempSync(join(work, `pnpm-${name.replace('@rigging/', '')}-`));
  const source = (n) =>
    tarballOf(n)
      ? `file:${tarballOf(n).tarball}`
      : n === 'better-sqlite3'
        ? `link:${betterSqlite3}`
        : 'latest';
  const manifest = {
    name: 'consumer',
    private: true,
    dependencies: Object.fromEntries(names.map((n) => [n, source(n)])),
    pnpm: { overrides: Object.fromEntries(packed.map((p) => [p.name, `file:${p.tarball}`])) },
  };
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  run('pnpm', ['install', '--prefer-offline', '--ignore-scripts', '--reporter=silent'], dir);
  return dir;
}

/** The block with its types stripped and nothing else changed (no lowering for old Nodes). */
const stripTypes = (code) =>
  transformSync(code, { loader: 'ts', format: 'esm', target: 'esnext' }).code;

/** Runs a file and checks it succeeds and prints something. */
function expectRuns(args, cwd) {
  const result = node(args, cwd);
  expect(result.status, `${args.join(' ')} in ${cwd}:\n${result.output}`).toBe(0);
  expect(result.output.trim(), `${args.join(' ')} printed nothing`).not.toBe('');
  return result.output;
}

describe.each(publishedPackages().map(({ name }) => [name]))('%s à la carte', (name) => {
  let readme = '';
  let examples = [];
  let needs = [];
  let dir = '';

  it('packs with LICENSE, README with its examples, CHANGELOG and .d.ts types', () => {
    const tarball = tarballOf(name);
    expect(tarball, `${name} was not packed`).toBeDefined();
    expect(tarball.problems).toEqual([]);
    const license = execFileSync('tar', ['-xzOf', tarball.tarball, 'package/LICENSE'], {
      encoding: 'utf8',
    });
    expect(license).toBe(execFileSync('cat', [join(root, 'LICENSE')], { encoding: 'utf8' }));
    readme = execFileSync('tar', ['-xzOf', tarball.tarball, 'package/README.md'], {
      encoding: 'utf8',
    });
    examples = readmeExamples(readme);
    expect(examples.length, `${name}'s README shows no example`).toBeGreaterThan(0);
  });

  it("names in each example's install command exactly what the example imports", () => {
    const all = new Set();
    for (const { file, code } of examples) {
      const imported = importedPackages(code);
      // @rigging/sql opens SQLite by default in the examples: its driver is part of the install.
      if (imported.has('@rigging/sql')) imported.add('better-sqlite3');
      expect([...installCommand(readme, file)].sort(), `${name} README, ${file}`).toEqual(
        [...imported].sort(),
      );
      for (const n of imported) all.add(n);
    }
    needs = [...all];
  });

  it('installs alone with npm and loads every entry from ESM and CommonJS', () => {
    dir = npmProject(name, closure([name]));
    const manifest = tarballOf(name).manifest;
    const optional = Object.keys(manifest.peerDependenciesMeta ?? {});
    for (const entry of Object.keys(manifest.exports).filter((e) => e !== './package.json')) {
      const specifier = entry === '.' ? name : `${name}/${entry.slice(2)}`;
      const esm = node(['--input-type=module', '-e', `await import('${specifier}')`], dir);
      const cjs = node(['-e', `require('${specifier}')`], dir);
      const peer = ENTRY_PEERS[entry];
      for (const result of [esm, cjs]) {
        if (peer !== undefined && optional.includes(peer)) {
          // Entries that need an optional peer import it statically (bundlers follow it).
          expect(result.status, `${specifier} without ${peer}`).not.toBe(0);
          expect(result.output).toContain(`Cannot find `);
          expect(result.output).toContain(`'${peer}'`);
        } else {
          expect(result.output, `${specifier} loads`).toBe('');
          expect(result.status).toBe(0);
        }
      }
    }
  });

  it.runIf(MODES.has('npm'))(
    'runs each README example with npm: .mts with tsx, .mjs with node',
    () => {
      expect(Date.now() - started, 'the test outgrew its time budget').toBeLessThan(DEADLINE_MS);
      npmInstall(
        dir,
        needs.filter((n) => n !== name),
      );
      for (const [index, { code }] of examples.entries()) {
        writeFileSync(join(dir, `example${index}.mts`), code);
        writeFileSync(join(dir, `example${index}.mjs`), stripTypes(code));
        expectRuns([tsx, `example${index}.mts`], dir);
        expectRuns([`example${index}.mjs`], dir);
      }
    },
  );

  it('loads each entry that needs an optional peer from ESM and CommonJS once the peer is installed', () => {
    const manifest = tarballOf(name).manifest;
    for (const [entry, peer] of Object.entries(ENTRY_PEERS)) {
      if (!manifest.exports[entry] || !manifest.peerDependencies?.[peer]) continue;
      if (!existsSync(join(dir, 'node_modules', ...peer.split('/')))) npmInstall(dir, [peer]);
      const specifier = `${name}/${entry.slice(2)}`;
      for (const args of [
        ['--input-type=module', '-e', `await import('${specifier}')`],
        ['-e', `require('${specifier}')`],
      ]) {
        const result = node(args, dir);
        expect(result.output, `${specifier} loads`).toBe('');
        expect(result.status).toBe(0);
      }
    }
  });

  it.runIf(MODES.has('pnpm'))('runs each README example with pnpm (strict)', () => {
    expect(Date.now() - started, 'the test outgrew its time budget').toBeLessThan(DEADLINE_MS);
    const project = pnpmProject(name, needs.includes(name) ? needs : [name, ...needs]);
    for (const [index, { code }] of examples.entries()) {
      writeFileSync(join(project, `example${index}.mjs`), stripTypes(code));
      expectRuns([`example${index}.mjs`], project);
    }
  });

  it.runIf(MODES.has('esbuild'))('runs each README example bundled by esbuild', () => {
    expect(Date.now() - started, 'the test outgrew its time budget').toBeLessThan(DEADLINE_MS);
    if (!MODES.has('npm'))
      npmInstall(
        dir,
        needs.filter((n) => n !== name),
      );
    const deployed = mkdtempSync(join(work, `bundle-${name.replace('@rigging/', '')}-`));
    mkdirSync(join(deployed, 'node_modules'));
    for (const addon of NATIVE) {
      symlinkSync(join(dir, 'node_modules', addon), join(deployed, 'node_modules', addon));
    }
    for (const [index, { code }] of examples.entries()) {
      writeFileSync(join(dir, `bundled${index}.mts`), code);
      buildSync({
        entryPoints: [join(dir, `bundled${index}.mts`)],
        outfile: join(deployed, `bundle${index}.mjs`),
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        external: NATIVE,
        logLevel: 'silent',
        // CommonJS dependencies call require(); an ES module bundle provides it.
        banner: {
          js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
        },
      });
      expectRuns([`bundle${index}.mjs`], deployed);
    }
  });
});
