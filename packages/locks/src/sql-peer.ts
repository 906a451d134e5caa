import { requireOptionalPeer } from '@rigging/core';

type Sql = typeof import('@rigging/sql');

/**
 * The values `@rigging/locks/sql` uses from its optional peer `@rigging/sql`, loaded when that
 * entry is: without the peer installed, importing it throws `locks.peer_missing` naming what to
 * install instead of a bare module-resolution failure.
 * @internal
 */
export const { isConnectionError, isRetryableError, sql } = requireOptionalPeer<Sql>(
  '@rigging/sql',
  {
    from: import.meta.url,
    neededBy: '@rigging/locks/sql',
    code: 'locks.peer_missing',
  },
);
