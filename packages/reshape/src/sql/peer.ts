import { requireOptionalPeer } from '@rigging/core';

type Sql = typeof import('@rigging/sql');

/**
 * The values `@rigging/reshape/sql` uses from its optional peer `@rigging/sql`, loaded when that
 * entry is: without the peer installed, importing it throws `reshape.peer_missing` naming what to
 * install instead of a bare module-resolution failure.
 * @internal
 */
export const { CompiledQuery, isUniqueViolation } = requireOptionalPeer<Sql>('@rigging/sql', {
  from: import.meta.url,
  neededBy: '@rigging/reshape/sql',
  code: 'reshape.peer_missing',
});
