// Checks what every published package.json must carry (run by `pnpm lint`): the root LICENSE
// copied verbatim into the package, the metadata npm shows, the files its tarball ships, and
// exports conditions in the order that serves ESM and CommonJS (require(esm)) consumers alike.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const license = readFileSync(join(root, 'LICENSE'), 'utf8');
const repository = 'git+https://github.com/rigging-dev/rigging.git';
const problems = [];

for (const name of readdirSync(join(root, 'packages'))) {
  const dir = join(root, 'packages', name);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  if (pkg.private) continue;
  const fail = (message) => problems.push(`${pkg.name}: ${message}`);
  let copy = '';
  try {
    copy = readFileSync(join(dir, 'LICENSE'), 'utf8');
  } catch {
    // reported below
  }
  if (copy !== license) fail('LICENSE is missing or differs from the root LICENSE');
  if (pkg.license !== 'Apache-2.0') fail('license must be Apache-2.0');
  for (const field of ['description', 'author', 'homepage', 'bugs', 'keywords']) {
    if (pkg[field] === undefined) fail(`${field} is missing`);
  }
  if (pkg.repository?.url !== repository || pkg.repository?.directory !== `packages/${name}`) {
    fail(`repository must be { type: git, url: ${repository}, directory: packages/${name} }`);
  }
  for (const file of ['dist', 'LICENSE', 'README.md', 'CHANGELOG.md']) {
    if (!pkg.files?.includes(file)) fail(`files must include ${file}`);
  }
  for (const [entry, target] of Object.entries(pkg.exports ?? {})) {
    if (typeof target === 'string') continue;
    const conditions = Object.keys(target);
    if (
      conditions[0] !== 'types' ||
      !conditions.includes('import') ||
      conditions.at(-1) !== 'default'
    ) {
      fail(`exports["${entry}"] must list types first, then import, and default last`);
    }
  }
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
