// Fencing, in one place: every claim of a key's op gets a token one above the key's current one,
// and a completion, a release or a heartbeat counts only while the key row still names the
// claim's op and token. (The PostgreSQL functions of `pg-functions.ts` apply the same two rules
// in PL/pgSQL: `token + 1` on a grant, `state = 'running' and running_op = … and token = …` on a
// completion.)
import type { Expression, ExpressionBuilder, SqlBool } from '@rigging/sql';
import type { Claim } from '../backend.js';
import type { KeyRow } from './rows.js';

/** The token of the next claim of a key whose current token is `current`. @internal */
export const nextToken = (current: number | string): number => Number(current) + 1;

/** Whether key row `k` (read under its lock) is still held by `claim`. @internal */
export const holds = (k: KeyRow | undefined, claim: Claim): boolean =>
  !!k && k.state === 'running' && k.running_op === claim.op.id && Number(k.token) === claim.token;

/** The same condition in SQL, on the key rows of queue `name`: held by one of `claims`. @internal */
export function heldBy(name: string, claims: readonly Claim[]) {
  return (eb: ExpressionBuilder<any, any>): Expression<SqlBool> =>
    eb.and([
      eb('queue', '=', name),
      eb('state', '=', 'running'),
      eb.or(
        claims.map((c) =>
          eb.and([
            eb('op_key', '=', c.op.key),
            eb('running_op', '=', c.op.id),
            eb('token', '=', c.token),
          ]),
        ),
      ),
    ]);
}
