import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { RiggingError, requireOptionalPeer } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'rigging-peer-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A package at `root/node_modules/<name>` that is an ES module, as every rigging package is. */
function installPeer(name: string, source: string): void {
  const dir = join(root, 'node_modules', name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name, type: 'module', exports: { '.': { default: './index.js' } } }),
  );
  writeFileSync(join(dir, 'index.js'), source);
}

const from = pathToFileURL(join(root, 'entry.js')).href;
const options = { from, neededBy: '@scope/pkg/sql', code: 'pkg.peer_missing' };

describe('requireOptionalPeer', () => {
  it('loads an installed ES module peer synchronously, resolved from `from`', () => {
    installPeer(
      'present-peer',
      'export const answer = 42;\nexport function twice(n) { return 2 * n; }\n',
    );
    const peer = requireOptionalPeer<{ answer: number; twice(n: number): number }>(
      'present-peer',
      options,
    );
    expect(peer.answer).toBe(42);
    expect(peer.twice(4)).toBe(8);
  });

  it('names what to install when the peer is missing', () => {
    let thrown: unknown;
    try {
      requireOptionalPeer('absent-peer', options);
    } catch (error) {
      thrown = error;
    }
    expect(RiggingError.hasCode(thrown, 'pkg.peer_missing')).toBe(true);
    expect((thrown as Error).message).toBe('@scope/pkg/sql needs absent-peer: npm i absent-peer');
    expect((thrown as Error).cause).toMatchObject({ code: 'MODULE_NOT_FOUND' });
  });

  it('lets an installed peer that fails to load report its own error', () => {
    installPeer('broken-peer', "import 'not-installed-anywhere';\n");
    expect(() => requireOptionalPeer('broken-peer', options)).toThrow(
      expect.not.objectContaining({ code: 'pkg.peer_missing' }),
    );
    installPeer('throwing-peer', "throw new Error('boom at load');\n");
    expect(() => requireOptionalPeer('throwing-peer', options)).toThrow('boom at load');
  });
});
