// The example a package README shows is the file its tests run. In every packages/*/README.md, a
// `<!-- example: examples/<file> -->` line is followed (after a blank line) by a ```ts block holding that file as a user
// writes it: without its leading `//` comment lines, importing the package by name.
//   node scripts/check-readme-examples.mjs           checks (part of `pnpm lint`): exit 1 on drift
//   node scripts/check-readme-examples.mjs --write   pastes every file into its README again
// The à-la-carte test imports `readmeExamples` to run the blocks of the published READMEs.
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const MARKER = /^<!-- example: (examples\/[^\s]+) -->\n\n```ts\n([\s\S]*?)\n```$/gm;

/** The marked example blocks of a README: `{ file, code }` in order (`file` is `examples/…`). */
export function readmeExamples(readme) {
  return [...readme.matchAll(MARKER)].map((match) => ({ file: match[1], code: match[2] }));
}

/** The example file as its README shows it: no header comment, the package imported by name. */
export function exampleBody(source, packageName) {
  const lines = source.replace(/\s+$/, '').split('\n');
  let start = 0;
  while (start < lines.length && lines[start].startsWith('//')) start += 1;
  return lines
    .slice(start)
    .join('\n')
    .replace(/^\n+/, '')
    .replaceAll(`'../src/index.js'`, `'${packageName}'`);
}

/** Every package README with its marked examples: what it shows and what its file says. */
export function workspaceExamples() {
  const found = [];
  for (const pkg of readdirSync(join(root, 'packages'))) {
    const dir = join(root, 'packages', pkg);
    const readme = join(dir, 'README.md');
    if (!existsSync(readme)) continue;
    const name = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).name;
    found.push({ pkg, name, dir, readme, text: readFileSync(readme, 'utf8') });
  }
  return found;
}

function main(write) {
  const problems = [];
  let checked = 0;
  let written = 0;
  for (const { pkg, name, dir, readme, text } of workspaceExamples()) {
    const examples = readmeExamples(text);
    if (examples.length === 0 && existsSync(join(dir, 'examples'))) {
      problems.push(`packages/${pkg}/README.md: no <!-- example: examples/… --> block`);
    }
    const next = text.replace(MARKER, (block, file, code) => {
      const where = `packages/${pkg}/README.md: ${file}`;
      const path = join(dir, file);
      if (!existsSync(path)) {
        problems.push(`${where}: no such file`);
        return block;
      }
      checked += 1;
      const body = exampleBody(readFileSync(path, 'utf8'), name);
      if (body === code) return block;
      if (!write) {
        problems.push(
          `${where}: the README's code differs from the file; run \`pnpm docs:examples\``,
        );
      }
      return `<!-- example: ${file} -->\n\n\`\`\`ts\n${body}\n\`\`\``;
    });
    if (write && next !== text) {
      writeFileSync(readme, next);
      written += 1;
    }
  }
  if (problems.length > 0) {
    console.error(problems.join('\n'));
    process.exitCode = 1;
  } else if (write) {
    console.log(`check-readme-examples: ${checked} examples, ${written} README(s) rewritten`);
  } else {
    console.log(`check-readme-examples: ${checked} README examples match their files`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.includes('--write'));
}
