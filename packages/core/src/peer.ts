import { createRequire } from 'node:module';
import { RiggingError } from './errors.js';

/** Where an optional peer is loaded from and what to say when it is missing. */
export interface OptionalPeerOptions {
  /** `import.meta.url` of the module that needs the peer: resolution starts there. */
  from: string;
  /** The entry that needs it, named in the error (`@rigging/locks/sql`). */
  neededBy: string;
  /** Stable code of the error thrown when the peer is not installed (`locks.peer_missing`). */
  code: string;
}

/**
 * Loads an optional peer dependency synchronously (an ES module through `require`, so Node >=
 * 20.19), for entries whose whole purpose needs it, such as `@rigging/locks/sql`. Unlike a static
 * `import`, a missing peer is a {@link RiggingError} with `options.code` whose message names what
 * to install (`@rigging/locks/sql needs @rigging/sql: npm i @rigging/sql`), and the entry still
 * loads with `require()` (no top-level await). Errors other than "not installed" propagate.
 *
 * Bundlers (esbuild, rollup, webpack) do not follow a `createRequire` call: a bundle of an entry
 * that loads its peer this way lacks the peer. An entry meant to be bundled imports its peer with
 * a static `import` instead (rigging's `/sql` entries do), trading this error for the runtime's.
 */
export function requireOptionalPeer<T>(specifier: string, options: OptionalPeerOptions): T {
  const require = createRequire(options.from);
  try {
    require.resolve(specifier);
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code !== 'MODULE_NOT_FOUND') throw error;
    throw new RiggingError(
      options.code,
      `${options.neededBy} needs ${specifier}: npm i ${specifier}`,
      { cause: error, details: { package: specifier, neededBy: options.neededBy } },
    );
  }
  return require(specifier) as T;
}
