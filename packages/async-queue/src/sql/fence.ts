// Fencing, in one place: every claim of a key's op gets a token one above the key's current one,
// and a completion, a release or a heartbeat counts only while the key row still names the claim's
// op and token. (The PostgreSQL functions of `pg-functions.ts` and `pg-set-functions.ts` apply the
// same two rules in PL/pgSQL: `token + 1` on a grant, `state = 'running' and running_op = … and
// token = …` on a completion.)
import type { Expression, ExpressionBuilder, SqlBool } from '@rigging/sql';
import type { Claim } from '../backend.js';
import type { KeyRow } from './rows.js';

/** The token of the next claim of a key whose current token is `current`. @internal */
export const nextToken = (current: number | string): number => Number(current) + 1;

/** Whether key row `k` (read under its lock) is still held by `claim`. @internal */
export const holds = (k: KeyRow | undefined, claim: Claim): boolean =>
  !!k && k.state === 'running' && k.running_op === claim.op.id && Number(k.token) === claim.token;

/** A claim as the fencing condition reads it: its key, its op and its token. @internal */
export interface ClaimFence {
  queue: string;
  key: string;
  op: string;
  token: number;
}

type Eb = ExpressionBuilder<any, any>;

/** The key row of `key` runs `op` under `token` (the row of a running key: see below). */
const runs = (eb: Eb, key: string, op: string, token: number) =>
  eb.and([eb('op_key', '=', key), eb('running_op', '=', op), eb('token', '=', token)]);

/** The same condition in SQL, on the key rows of queue `name`: held by one of `claims`. @internal */
export function heldBy(name: string, claims: readonly Claim[]) {
  return (eb: Eb): Expression<SqlBool> =>
    eb.and([
      eb('queue', '=', name),
      eb('state', '=', 'running'),
      eb.or(claims.map((c) => runs(eb, c.op.key, c.op.id, c.token))),
    ]);
}

/** The same condition for one claim (its values may be a prepared query's parameters). @internal */
export function heldByClaim(fence: ClaimFence) {
  return (eb: Eb): Expression<SqlBool> =>
    eb.and([
      eb('queue', '=', fence.queue),
      eb('state', '=', 'running'),
      runs(eb, fence.key, fence.op, fence.token),
    ]);
}
