import { requireOptionalPeer } from '@rigging/core';

type Sql = typeof import('@rigging/sql');

/**
 * The values `@rigging/tasks/sql` uses from its optional peer `@rigging/sql`, loaded when that
 * entry is: without the peer installed, importing it throws `tasks.peer_missing` naming what to
 * install instead of a bare module-resolution failure.
 * @internal
 */
export const { isConnectionError, isUniqueViolation, sql } = requireOptionalPeer<Sql>(
  '@rigging/sql',
  {
    from: import.meta.url,
    neededBy: '@rigging/tasks/sql',
    code: 'tasks.peer_missing',
  },
);
