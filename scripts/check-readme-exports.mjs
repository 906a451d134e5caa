// Every runtime export of a published package is documented in its README's API section: for
// each `exports` entry, the values its built module exports (and its published declarations
// keep: `@internal` ones are stripped) must each appear inside a `code span` of the README's
// `## API` section (an error class may be in `## Errors` instead). Needs `dist/` (run after the build; `pnpm lint`
// runs it after `turbo run lint:package`, which builds).
//   node scripts/check-readme-exports.mjs   exit 1 with the list of undocumented exports
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { publishedPackages } from './pack-all.mjs';

/** The text of a README's `## <title>` section, up to the next `## ` heading ('' if none). */
function section(readme, title) {
  const start = readme.search(new RegExp(`^## ${title}\\s*$`, 'm'));
  if (start === -1) return '';
  const rest = readme.slice(start + 1);
  const end = rest.search(/^## /m);
  return end === -1 ? rest : rest.slice(0, end);
}

/**
 * The identifiers that appear inside code spans of a README's API section (and of its Errors
 * section, where a package documents its error class).
 */
export function documentedNames(readme) {
  const names = new Set();
  for (const text of [section(readme, 'API'), section(readme, 'Errors')]) {
    for (const [, span] of text.matchAll(/`([^`\n]+)`/g)) {
      for (const [word] of span.matchAll(/[A-Za-z_$][\w$]*/g)) names.add(word);
    }
  }
  return names;
}

/** `{ entry, names }` per `exports` entry: the runtime names its published declarations keep. */
export async function runtimeExports({ dir, manifest }) {
  const found = [];
  for (const [entry, target] of Object.entries(manifest.exports ?? {})) {
    if (entry === './package.json') continue;
    const js = typeof target === 'string' ? target : (target.import ?? target.default);
    const dts = typeof target === 'string' ? undefined : target.types;
    const file = join(dir, js);
    if (!existsSync(file)) throw new Error(`${manifest.name}: ${js} is not built (run pnpm build)`);
    const declarations =
      dts && existsSync(join(dir, dts)) ? readFileSync(join(dir, dts), 'utf8') : '';
    const names = Object.keys(await import(pathToFileURL(file).href)).filter(
      (name) =>
        name !== 'default' && new RegExp(`\\b${name.replace(/\$/g, '\\$')}\\b`).test(declarations),
    );
    found.push({ entry, names });
  }
  return found;
}

async function main() {
  const problems = [];
  let checked = 0;
  for (const pkg of publishedPackages()) {
    const documented = documentedNames(readFileSync(join(pkg.dir, 'README.md'), 'utf8'));
    for (const { entry, names } of await runtimeExports(pkg)) {
      const specifier = entry === '.' ? pkg.name : `${pkg.name}/${entry.slice(2)}`;
      const missing = names.filter((name) => !documented.has(name));
      checked += names.length;
      if (missing.length > 0) problems.push(`${specifier}: ${missing.join(', ')}`);
    }
  }
  if (problems.length > 0) {
    console.error(
      "check-readme-exports: runtime exports missing from their README's API section (name each in a\n" +
        '`code span` under `## API`, or tag it @internal if users should not see it):\n' +
        problems.map((p) => `  ${p}`).join('\n'),
    );
    process.exitCode = 1;
  } else {
    console.log(`check-readme-exports: ${checked} runtime exports documented`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await main();
}
