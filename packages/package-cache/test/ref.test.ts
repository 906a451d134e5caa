import { join, posix, relative, sep } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import { validateRef } from '../src/index.js';
import { linkProblem, relativePathProblem } from '../src/entry-checks.js';

const root = '/var/cache/pkgs';
const nasty = fc.oneof(
  fc.string({ maxLength: 140 }),
  fc.constantFrom('..', '.', '/', '\\', '\0', '../x', 'a/..', '....', 'C:', '~', '.a'),
  fc
    .array(fc.constantFrom('a', '.', '/', '\\', '..', '\0', '1', '-', '_', '@'), { maxLength: 12 })
    .map((parts) => parts.join('')),
);

describe('ref validation (property)', () => {
  it('an accepted ref always maps to exactly {root}/{fqn}/{version}/{id} inside root', () => {
    fc.assert(
      fc.property(nasty, nasty, nasty, (fqn, version, id) => {
        let ok = true;
        try {
          validateRef({ fqn, version, id });
        } catch (error) {
          ok = false;
          expect(RiggingError.hasCode(error, 'package-cache.invalid_ref')).toBe(true);
        }
        if (!ok) return;
        const rel = relative(root, join(root, fqn, version, id));
        expect(rel.split(sep)).toEqual([fqn, version, id]);
        for (const part of [fqn, version, id]) {
          expect(part.startsWith('.')).toBe(false);
          expect(part.length).toBeLessThanOrEqual(128);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses a name that escapes once a backslash is not a separator (POSIX)', () => {
    // Found by the property below: `a\a` is one directory on POSIX, so `..` twice climbs out.
    expect(relativePathProblem('a\\a/../..')).toBe('escapes the package directory');
    expect(relativePathProblem('a\\a/..')).toBeUndefined();
  });

  it('archive paths judged safe never leave the package directory', () => {
    fc.assert(
      fc.property(nasty, nasty, (entry, link) => {
        if (relativePathProblem(entry) === undefined) {
          const rel = relative('/pkg', join('/pkg', entry));
          expect(rel === '..' || rel.startsWith(`..${sep}`)).toBe(false);
          if (
            linkProblem(entry, link, 'symlink') === undefined &&
            !link.includes('\\') &&
            !entry.includes('\\')
          ) {
            // A symlink resolves from the directory holding it.
            const target = relative('/pkg', join('/pkg', posix.dirname(entry), link));
            expect(target === '..' || target.startsWith(`..${sep}`)).toBe(false);
          }
        }
      }),
      { numRuns: 2000 },
    );
  });
});
