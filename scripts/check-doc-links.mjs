// Checks every Markdown file tracked by git: each link must point inside the repository, at a
// file that exists. Links to the local services (127.0.0.1, localhost) are allowed.
// Run: node scripts/check-doc-links.mjs   (part of `pnpm lint`)
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = resolve(
  execFileSync('git', ['rev-parse', '--show-toplevel'], { encoding: 'utf8' }).trim(),
);
const files = execFileSync('git', ['ls-files', '-z', '*.md'], { cwd: root, encoding: 'utf8' })
  .split('\0')
  .filter(Boolean);

const LOCAL = /^https?:\/\/(127\.0\.0\.1|localhost)([:/]|$)/;
// [text](target "title"), ![alt](target), <scheme://…>, and bare scheme://… outside code spans.
const LINK =
  /\]\(\s*<?([^)\s>]+)>?[^)]*\)|<([a-z][a-z0-9+.-]*:\/\/[^>\s]+)>|(?<![`(<\w])(https?:\/\/[^\s)`>\]]+)/gi;

const problems = [];
for (const file of files) {
  const text = readFileSync(join(root, file), 'utf8');
  for (const match of text.matchAll(LINK)) {
    const target = match[1] ?? match[2] ?? match[3];
    if (!target || target.startsWith('#') || LOCAL.test(target)) continue;
    const line = text.slice(0, match.index).split('\n').length;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
      problems.push(`${file}:${line}: links outside the repository: ${target}`);
      continue;
    }
    const path = resolve(root, dirname(file), decodeURI(target.split('#')[0]));
    if (relative(root, path).startsWith('..')) {
      problems.push(`${file}:${line}: links outside the repository: ${target}`);
    } else if (!existsSync(path)) {
      problems.push(`${file}:${line}: links to a missing file: ${target}`);
    }
  }
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exitCode = 1;
} else {
  console.log(`check-doc-links: ${files.length} Markdown files, every link inside the repository`);
}
