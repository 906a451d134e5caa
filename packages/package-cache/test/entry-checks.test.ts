// The checks every archive entry passes before anything is written, whatever the format: which
// paths and link targets are refused (and why, as the error tells the user), which are accepted
// (a safe package must extract), and the errors' shape.
import { describe, expect, it } from 'vitest';
import { RiggingError } from '@rigging/core';
import {
  corrupt,
  linkProblem,
  relativePathProblem,
  unsafe,
  withoutDir,
} from '../src/entry-checks.js';

describe('relativePathProblem', () => {
  it('accepts paths that stay inside the package directory', () => {
    for (const path of [
      'a',
      'package/index.js',
      './a',
      'a/./b',
      'a/../b',
      'a/b/../../c',
      'a/b/..',
      'a/',
      'a//b',
      'a\\b',
      'a\\..\\b',
      '..a',
      'a..',
      '...',
      'a/.../b',
      'ab:c',
      '1:',
      'a/C:',
    ]) {
      expect({ path, problem: relativePathProblem(path) }).toEqual({ path, problem: undefined });
    }
  });

  it('refuses an empty name, NUL, absolute paths and paths escaping with ..', () => {
    const cases: Array<[string, string]> = [
      ['', 'has an empty name'],
      ['a\0b', 'contains NUL'],
      ['\0', 'contains NUL'],
      ['/etc/passwd', 'is absolute'],
      ['\\windows', 'is absolute'],
      ['C:', 'is absolute'],
      ['c:foo', 'is absolute'],
      ['Z:\\x', 'is absolute'],
      ['..', 'escapes the package directory'],
      ['../x', 'escapes the package directory'],
      ['./..', 'escapes the package directory'],
      ['a/../..', 'escapes the package directory'],
      ['a/./../../b', 'escapes the package directory'],
      ['a/../../a/b', 'escapes the package directory'],
      ['a\\..\\..\\b', 'escapes the package directory'],
      ['a//..//..', 'escapes the package directory'],
    ];
    for (const [path, problem] of cases) {
      expect({ path, problem: relativePathProblem(path) }).toEqual({ path, problem });
    }
  });
});

describe('linkProblem', () => {
  it('accepts links that stay inside the package directory', () => {
    const cases: Array<[string, string, 'symlink' | 'hardlink']> = [
      ['link', 'target', 'symlink'],
      ['a/link', '../target', 'symlink'],
      ['a/b/link', '../../target', 'symlink'],
      ['a/link', './b/../c', 'symlink'],
      ['a\\b\\link', '../../target', 'symlink'],
      ['link', 'a/b', 'hardlink'],
      ['deep/link', 'a/b', 'hardlink'],
    ];
    for (const [entry, target, kind] of cases) {
      expect({ entry, target, problem: linkProblem(entry, target, kind) }).toEqual({
        entry,
        target,
        problem: undefined,
      });
    }
  });

  it('refuses empty targets, absolute targets and targets that leave the package directory', () => {
    const cases: Array<[string, string, 'symlink' | 'hardlink', string]> = [
      ['link', '', 'symlink', 'is a link to nothing'],
      ['link', '', 'hardlink', 'is a link to nothing'],
      ['link', '/etc/passwd', 'symlink', 'is a symlink to an absolute path (/etc/passwd)'],
      ['link', '\\share', 'symlink', 'is a symlink to an absolute path (\\share)'],
      ['link', 'C:\\x', 'symlink', 'is a symlink to an absolute path (C:\\x)'],
      ['link', '..', 'symlink', 'is a symlink pointing outside (..)'],
      ['link', '../x', 'symlink', 'is a symlink pointing outside (../x)'],
      ['a/link', '../../x', 'symlink', 'is a symlink pointing outside (../../x)'],
      ['a\\link', '../../x', 'symlink', 'is a symlink pointing outside (../../x)'],
      ['link', '/etc/passwd', 'hardlink', 'is a hard link that is absolute'],
      ['link', '../x', 'hardlink', 'is a hard link that escapes the package directory'],
      ['link', 'a\0', 'hardlink', 'is a hard link that contains NUL'],
      // A hard link's target is named from the package root: ".." anywhere is refused, even when
      // it would come back inside.
      ['link', 'a/../b', 'hardlink', 'is a hard link with ".." in its target'],
      ['link', 'a\\..\\b', 'hardlink', 'is a hard link with ".." in its target'],
      ['link', 'a//..//b', 'hardlink', 'is a hard link with ".." in its target'],
    ];
    for (const [entry, target, kind, problem] of cases) {
      expect({ entry, target, kind, problem: linkProblem(entry, target, kind) }).toEqual({
        entry,
        target,
        kind,
        problem,
      });
    }
  });
});

describe('errors', () => {
  it('unsafe names the package, the entry and the problem', () => {
    const error = unsafe('pkg@1.0.0', 'is absolute', '/etc/passwd');
    expect(RiggingError.hasCode(error, 'package-cache.unsafe_archive')).toBe(true);
    expect(error.message).toBe('refusing pkg@1.0.0: entry "/etc/passwd" is absolute');
    expect(error.details).toEqual({ problem: 'is absolute', entry: '/etc/passwd' });
    const whole = unsafe('pkg@1.0.0', 'has too many entries');
    expect(whole.message).toBe('refusing pkg@1.0.0: has too many entries');
    expect(whole.details).toEqual({ problem: 'has too many entries' });
  });

  it('corrupt names the package, the entry or the whole archive, and the problem', () => {
    const error = corrupt('pkg@1.0.0', 'bad checksum', 'a/b');
    expect(RiggingError.hasCode(error, 'package-cache.corrupt_archive')).toBe(true);
    expect(error.message).toBe('refusing pkg@1.0.0: entry "a/b" is corrupt (bad checksum)');
    expect(error.details).toEqual({ problem: 'bad checksum', entry: 'a/b' });
    const whole = corrupt('pkg@1.0.0', 'truncated');
    expect(whole.message).toBe('refusing pkg@1.0.0: the archive is corrupt (truncated)');
    expect(whole.details).toEqual({ problem: 'truncated' });
  });

  it('withoutDir makes paths in a message read relative to the package', () => {
    const dir = '/var/cache/pkgs/x/1/id.tmp';
    expect(
      withoutDir(`EEXIST: file already exists, open '${dir}/a/b' (in ${dir}); ${dir}/c`, dir),
    ).toBe("EEXIST: file already exists, open 'a/b' (in .); c");
    expect(withoutDir('nothing to change', dir)).toBe('nothing to change');
  });
});
