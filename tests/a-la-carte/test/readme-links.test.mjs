// The published form of a package README (scripts/readme-links.mjs) and the pack check's view of
// its links (scripts/pack-all.mjs).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { tarballProblems } from '../../../scripts/pack-all.mjs';
import { danglingLinks, publishedReadme, relativeLinks } from '../../../scripts/readme-links.mjs';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const dir = join(root, 'packages', 'locks');
const manifest = {
  name: '@rigging/locks',
  files: ['dist', 'LICENSE', 'README.md', 'CHANGELOG.md'],
  repository: {
    type: 'git',
    url: 'git+https://github.com/rigging-dev/rigging.git',
    directory: 'packages/locks',
  },
};
const repo = 'https://github.com/rigging-dev/rigging';

describe('publishedReadme', () => {
  it('points links to files that do not ship at the repository, keeps the rest', () => {
    const readme = [
      '[example](examples/file-lock.ts), [figures](BENCHMARKS.md), [bench](bench/index.ts)',
      '[map](../../docs/architecture.md#errors-and-codes), [examples](examples)',
      '[changes](CHANGELOG.md), [types](dist/index.d.ts), [errors](#errors), [x](https://x.example/)',
      '',
      '```md',
      '[inside a code block](BENCHMARKS.md)',
      '```',
    ].join('\n');
    const published = publishedReadme(readme, dir, manifest);
    expect(published).toContain(
      `[example](${repo}/blob/main/packages/locks/examples/file-lock.ts)`,
    );
    expect(published).toContain(`[figures](${repo}/blob/main/packages/locks/BENCHMARKS.md)`);
    expect(published).toContain(`[bench](${repo}/blob/main/packages/locks/bench/index.ts)`);
    expect(published).toContain(`[map](${repo}/blob/main/docs/architecture.md#errors-and-codes)`);
    expect(published).toContain(`[examples](${repo}/tree/main/packages/locks/examples)`);
    expect(published).toContain('[changes](CHANGELOG.md), [types](dist/index.d.ts)');
    expect(published).toContain('[errors](#errors), [x](https://x.example/)');
    expect(published).toContain('[inside a code block](BENCHMARKS.md)');
    expect(relativeLinks(published)).toEqual(['CHANGELOG.md', 'dist/index.d.ts']);
  });

  it('leaves no dangling link in any package README of the repository', () => {
    const files = ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md', 'dist/index.js'];
    for (const pkg of ['core', 'sql', 'locks', 'tasks', 'reshape']) {
      const pkgDir = join(root, 'packages', pkg);
      const text = publishedReadme(readFileSync(join(pkgDir, 'README.md'), 'utf8'), pkgDir, {
        ...manifest,
        name: `@rigging/${pkg}`,
      });
      expect(danglingLinks(text, files), pkg).toEqual([]);
    }
  });
});

describe('the pack check', () => {
  it('fails on a relative README link to a file that is not in the tarball', () => {
    const files = ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md', 'dist/index.js'];
    const exportsOnly = {
      exports: { '.': { types: './dist/index.js', default: './dist/index.js' } },
    };
    expect(tarballProblems(exportsOnly, files, '[a](dist/index.js) [b](CHANGELOG.md)')).toEqual([
      'exports["."] has no .d.ts types',
    ]);
    expect(tarballProblems({}, files, 'see [the bench](bench/index.ts)')).toEqual([
      'README.md links to bench/index.ts, which is not in the tarball',
    ]);
    expect(tarballProblems({}, files, '[types](dist/index.d.ts#L1)')).toEqual([
      'README.md links to dist/index.d.ts#L1, which is not in the tarball',
    ]);
  });
});
