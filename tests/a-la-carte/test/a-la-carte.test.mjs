// À la carte: every published package installs on its own. Each one is packed as it will be
// published, installed with npm into an empty project outside the workspace together with only
// the @rigging tarballs it depends on, loaded from ESM and CommonJS, and its README example
// (the file under its examples/) run from an .mjs and a .cjs file against the installed tarball.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { transformSync } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packAll } from '../../../scripts/pack-all.mjs';

const root = fileURLToPath(new URL('../../../', import.meta.url));
/** The driver the sql example needs, linked from the workspace where it is already compiled. */
const betterSqlite3 = join(
  fileURLToPath(new URL('..', import.meta.url)),
  'node_modules',
  'better-sqlite3',
);

/**
 * Per package: the README example it runs, what else its README tells the user to install for
 * that example (`@rigging/*` names come from the packed tarballs), and the subpath entries that
 * need the optional peer `@rigging/sql`.
 */
const CASES = {
  '@rigging/core': { example: 'wait-with-timeout.ts' },
  '@rigging/sql': { example: 'notes.ts', extras: [betterSqlite3] },
  '@rigging/locks': { example: 'file-lock.ts', needsSql: ['sql'] },
  '@rigging/tasks': { example: 'deploy.ts', extras: ['@rigging/sql'], needsSql: ['sql'] },
  '@rigging/package-cache': { example: 'http-cache.ts' },
  '@rigging/async-queue': { example: 'containers.ts', needsSql: ['sql'] },
  '@rigging/destroy-graph': { example: 'app-network-vms.ts' },
  '@rigging/reshape': { example: 'vgpu.ts', needsSql: ['sql'] },
};

/** The whole file must finish within this (npm's cache makes reruns much faster). */
const DEADLINE_MS = 6 * 60_000;
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

/** Runs npm in `cwd`, throwing with its output when it fails. */
function npm(args, cwd) {
  const result = spawnSync('npm', args, { cwd, env, encoding: 'utf8', timeout: 180_000 });
  if (result.status !== 0) {
    throw new Error(`npm ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`);
  }
}

/** Runs `node <args>` in `cwd`; returns its exit status and output. */
function node(args, cwd) {
  const result = spawnSync(process.execPath, args, { cwd, env, encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** The tarball of `name` and of every @rigging package it depends on, transitively. */
function closure(name) {
  const byName = new Map(packed.map((p) => [p.name, p]));
  const seen = new Set();
  const visit = (current) => {
    if (seen.has(current)) return;
    seen.add(current);
    for (const dependency of Object.keys(byName.get(current).manifest.dependencies ?? {})) {
      if (byName.has(dependency)) visit(dependency);
    }
  };
  visit(name);
  return [...seen].map((n) => byName.get(n).tarball);
}

/** An empty npm project outside the workspace with `specs` installed, as a user would do. */
function project(name, specs) {
  const dir = mkdtempSync(join(work, `${name.replace('@rigging/', '')}-`));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  npm(
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', ...specs],
    dir,
  );
  return dir;
}

/**
 * The README example as an ES module (types stripped, `await using` lowered for Node 20) and as
 * CommonJS: imports become `require` calls and the top-level awaits run in an async function.
 */
function exampleModules(name, file) {
  const source = readFileSync(
    join(root, 'packages', name.slice('@rigging/'.length), 'examples', file),
    'utf8',
  )
    // Examples inside the repository may import the sources; a user imports the package.
    .replaceAll(`'../src/index.js'`, `'${name}'`);
  const esm = transformSync(source, { loader: 'ts', format: 'esm', target: 'node20' }).code;
  const requires = [];
  const body = esm
    .replace(/^import ([^;"]+?) from (".+?");$/gm, (_line, clause, specifier) => {
      const named = clause.replace(/\s+/g, ' ').match(/^\{(.*)\}$/);
      const binding = named
        ? `{${named[1].replace(/ as /g, ': ')}}`
        : clause.replace(/^\* as /, '');
      requires.push(`const ${binding} = require(${specifier});`);
      return '';
    })
    .replace(/^export (?=async function|function|const|let|class)/gm, '')
    .replace(/^export \{[^}]*\};$/gm, '')
    .replaceAll('import.meta.url', 'require("node:url").pathToFileURL(__filename).href');
  const cjs = [
    '"use strict";',
    ...requires,
    '(async () => {',
    body,
    '})().catch((error) => {',
    '  console.error(error);',
    '  process.exitCode = 1;',
    '});',
  ].join('\n');
  return { esm, cjs };
}

describe.each(Object.entries(CASES))(
  '%s à la carte',
  (name, { example, extras = [], needsSql = [] }) => {
    let dir = '';

    it('packs with LICENSE, README, CHANGELOG and .d.ts types for every entry', () => {
      const tarball = packed.find((p) => p.name === name);
      expect(tarball, `${name} was not packed`).toBeDefined();
      expect(tarball.problems).toEqual([]);
      const license = execFileSync('tar', ['-xzOf', tarball.tarball, 'package/LICENSE'], {
        encoding: 'utf8',
      });
      expect(license).toBe(readFileSync(join(root, 'LICENSE'), 'utf8'));
    });

    it('installs alone and loads every entry from ESM and CommonJS', () => {
      dir = project(name, closure(name));
      const manifest = packed.find((p) => p.name === name).manifest;
      for (const entry of Object.keys(manifest.exports).filter((e) => e !== './package.json')) {
        const specifier = entry === '.' ? name : `${name}/${entry.slice(2)}`;
        const missingPeer = needsSql.includes(entry.slice(2));
        const esm = node(['--input-type=module', '-e', `await import('${specifier}')`], dir);
        const cjs = node(['-e', `require('${specifier}')`], dir);
        for (const run of [esm, cjs]) {
          if (missingPeer) {
            expect(run.status, `${specifier} without @rigging/sql`).not.toBe(0);
            expect(run.output).toContain(`${specifier} needs @rigging/sql: npm i @rigging/sql`);
          } else {
            expect(run.output, `${specifier} loads`).toBe('');
            expect(run.status).toBe(0);
          }
        }
      }
    });

    it(`runs examples/${example} from an .mjs and a .cjs file`, () => {
      expect(Date.now() - started, 'the install test outgrew its time budget').toBeLessThan(
        DEADLINE_MS,
      );
      const tarballs = new Map(packed.map((p) => [p.name, p.tarball]));
      if (extras.length > 0) {
        npm(
          [
            'install',
            '--prefer-offline',
            '--no-audit',
            '--no-fund',
            '--ignore-scripts',
            ...extras.map((e) => tarballs.get(e) ?? e),
          ],
          dir,
        );
      }
      const { esm, cjs } = exampleModules(name, example);
      writeFileSync(join(dir, 'example.mjs'), esm);
      writeFileSync(join(dir, 'example.cjs'), cjs);
      const fromEsm = node(['example.mjs'], dir);
      expect(fromEsm.status, fromEsm.output).toBe(0);
      expect(fromEsm.output.trim()).not.toBe('');
      const fromCjs = node(['example.cjs'], dir);
      expect(fromCjs.status, fromCjs.output).toBe(0);
      expect(fromCjs.output.split('\n').length).toBe(fromEsm.output.split('\n').length);
    });
  },
);
