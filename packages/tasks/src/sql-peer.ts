/**
 * The values `@rigging/tasks/sql` uses from its optional peer `@rigging/sql`, imported statically
 * so that bundlers (esbuild, rollup, webpack) follow the import and carry `@rigging/sql` into a
 * bundle. Only code that imports this subpath loads the peer; the package's main entry never does.
 *
 * The trade-off: without the peer installed, importing this subpath fails with the runtime's own
 * error, which names the missing package but not the command (Node: `ERR_MODULE_NOT_FOUND`,
 * "Cannot find package '@rigging/sql' imported from …/dist/sql.js"; a bundler: "Could not
 * resolve" at build time). The README's install line names it.
 * @internal
 */
import * as peer from '@rigging/sql';

export { isConnectionError, isUniqueViolation, sql } from '@rigging/sql';

/**
 * `withCommit` of `@rigging/sql` 0.2 and later (a transaction's last statement sent with its
 * commit); `undefined` with 0.1, where the log's write then runs as a statement of its own.
 */
export const withCommit = (peer as Partial<typeof peer>).withCommit;

/**
 * `prepareQuery` of `@rigging/sql` 0.2 and later (a statement built once per dialect); with 0.1,
 * a stand-in that builds the statement on every call.
 */
export const prepareQuery: typeof peer.prepareQuery =
  (peer as Partial<typeof peer>).prepareQuery ??
  ((build) => ({
    execute: (db, params) => db.executeQuery(build(db, params).compile(db)),
    bind: (db, params) => ({ compile: () => build(db, params).compile(db) }),
  }));
