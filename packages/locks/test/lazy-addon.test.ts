import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { spawnNode } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';

const fixture = fileURLToPath(new URL('./fixtures/lazy-addon.ts', import.meta.url));
const packageDir = fileURLToPath(new URL('..', import.meta.url));

describe('the native addon', () => {
  it('is loaded by the first FileLock, not by importing the package', async () => {
    const child = spawnNode(fixture, [new URL('../src/index.ts', import.meta.url).href]);
    const line = await child.waitForLine(/^\{/, 30_000);
    await child.exited;
    expect(JSON.parse(line)).toEqual({
      afterImport: false,
      afterMutex: false,
      afterFileLock: true,
    });
  });

  it('require() of the built package works and loads nothing native (dist/, as users run it)', () => {
    // the package refers to itself by name from its own directory
    const script = `
      const locks = require('@rigging/locks');
      const native = () => Object.keys(require.cache).some((p) => p.includes('fs-native-extensions'));
      const before = native();
      new locks.FileLock({ dir: require('node:os').tmpdir() + '/rigging-locks-require-' + process.pid }).close();
      console.log(JSON.stringify({ mutex: typeof locks.Mutex, before, after: native() }));`;
    const out = execFileSync(process.execPath, ['-e', script], {
      cwd: packageDir,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({
      mutex: 'function',
      before: false,
      after: true,
    });
  });
});
