import { join } from 'node:path';
import { PackageCacheError } from './errors.js';

/** Identifies one package build: its fully qualified name, its version and the upload id. */
export interface PackageRef {
  /** Fully qualified name, e.g. `io.murano.apps.Apache`. */
  readonly fqn: string;
  /** Version, e.g. `1.2.0` or `0.0.0-dev+abc`. */
  readonly version: string;
  /** Upload id: a new id for every (re-)upload of the same fqn/version. */
  readonly id: string;
}

/** Longest accepted fqn, version or id. */
export const MAX_SEGMENT_LENGTH = 128;

const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._+~@=-]*$/;

/** Why `value` is not a safe path segment, or `undefined` when it is. */
function segmentProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return `must be a string, got ${typeof value}`;
  if (value.length === 0) return 'must not be empty';
  if (value.length > MAX_SEGMENT_LENGTH)
    return `must be at most ${MAX_SEGMENT_LENGTH} characters, got ${value.length}`;
  if (value.includes('\0')) return 'must not contain NUL';
  if (value.includes('/') || value.includes('\\')) return 'must not contain path separators';
  if (value.includes('..')) return 'must not contain ".."';
  if (!SEGMENT.test(value))
    return 'must start with a letter, digit or "_" and contain only letters, digits and . _ + ~ @ = -';
  return undefined;
}

/** Validates a ref; throws `package-cache.invalid_ref` naming the bad field. */
export function validateRef(ref: PackageRef): PackageRef {
  if (typeof ref !== 'object' || ref === null) {
    throw new PackageCacheError('package-cache.invalid_ref', 'a package ref must be an object');
  }
  for (const field of ['fqn', 'version', 'id'] as const) {
    const problem = segmentProblem(ref[field]);
    if (problem !== undefined) {
      const shown = typeof ref[field] === 'string' ? JSON.stringify(ref[field].slice(0, 64)) : '';
      throw new PackageCacheError(
        'package-cache.invalid_ref',
        `invalid package ${field} ${shown}: ${problem}`,
        { details: { field, problem } },
      );
    }
  }
  return { fqn: ref.fqn, version: ref.version, id: ref.id };
}

/** `fqn/version/id`: the ref's key in indexes, lock names and events. */
export function refKey(ref: PackageRef): string {
  return `${ref.fqn}/${ref.version}/${ref.id}`;
}

/** Where the package lives: `{root}/{fqn}/{version}/{id}`. */
export function refPath(root: string, ref: PackageRef): string {
  return join(root, ref.fqn, ref.version, ref.id);
}

/** The sidecar metadata file: `{root}/{fqn}/{version}/.{id}.json`. */
export function metaPath(root: string, ref: PackageRef): string {
  return join(root, ref.fqn, ref.version, `.${ref.id}.json`);
}

/**
 * The "remove once unused" marker: `{root}/{fqn}/{version}/.{id}.outdated`, holding the reason
 * (`outdated` or `older-version`). Written by a downloader before it tries to remove a package;
 * whoever releases the package last removes it.
 */
export function outdatedPath(root: string, ref: PackageRef): string {
  return join(root, ref.fqn, ref.version, `.${ref.id}.outdated`);
}

/** True when `name` could be a valid segment (used when scanning the disk). */
export function isSegment(name: string): boolean {
  return segmentProblem(name) === undefined;
}
