// Checks that the example a package README shows is the file the tests run: in every
// packages/*/README.md, a link to `examples/<file>` followed (before the next heading) by a
// ```ts block must show that file, whole or without its leading `//` comment lines.
// Run: node scripts/check-readme-examples.mjs   (part of `pnpm lint`)
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const EXAMPLE_LINK = /\[`examples\/([^`]+\.ts)`\]\(examples\/[^)]+\)/g;

/** The example as a README may show it: the whole file, or the file after its header comment. */
function acceptedBodies(source) {
  const lines = source.replace(/\s+$/, '').split('\n');
  let start = 0;
  while (start < lines.length && lines[start].startsWith('//')) start += 1;
  return [lines.join('\n'), lines.slice(start).join('\n').replace(/^\n+/, '')];
}

const problems = [];
let checked = 0;
for (const pkg of readdirSync(join(root, 'packages'))) {
  const readme = join(root, 'packages', pkg, 'README.md');
  if (!existsSync(readme)) continue;
  const text = readFileSync(readme, 'utf8');
  for (const match of text.matchAll(EXAMPLE_LINK)) {
    const after = text.slice(match.index + match[0].length);
    const nextHeading = after.search(/^#/m);
    const block = /^```ts\n([\s\S]*?)\n```$/m.exec(after);
    if (!block || (nextHeading !== -1 && block.index > nextHeading)) continue;
    const file = join(root, 'packages', pkg, 'examples', match[1]);
    const where = `packages/${pkg}/README.md: examples/${match[1]}`;
    if (!existsSync(file)) {
      problems.push(`${where}: no such file`);
      continue;
    }
    checked += 1;
    if (!acceptedBodies(readFileSync(file, 'utf8')).includes(block[1])) {
      problems.push(`${where}: the README's code differs from the file; paste the file again`);
    }
  }
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exitCode = 1;
} else {
  console.log(`check-readme-examples: ${checked} README examples match their files`);
}
