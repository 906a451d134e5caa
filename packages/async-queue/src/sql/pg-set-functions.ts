// PostgreSQL's claim and batch of successes as set-based statements (migration
// `pg-set-based-claims`): the hot paths today. Their rows are those of `pg-claimed-rows.ts`.
import type { SchemaNames } from './names.js';
import { CLAIMED_OP_COLUMNS, claimedRow } from './pg-claimed-rows.js';
import { CLAIM_PARAMS, SUCCEED_MANY_PARAMS } from './pg-functions.js';

/**
 * The settings of the set-based functions below: a generic plan (their `limit` is a parameter,
 * for which PostgreSQL would otherwise plan anew on each call) that finds every row through an
 * index or by its `ctid`, whatever the tables' statistics say (none on fresh tables).
 */
const SET_BASED = 'set plan_cache_mode = force_generic_plan set enable_seqscan = off';

/**
 * PostgreSQL: {@link claimRowsFunction} as one statement (its own name, `n.claimSetFn`; same
 * signature and rows): up to `p_n` ready keys locked in fair order (skipping locked ones), the
 * head op of each from its `head_seq` on, and the key rows claimed by their `ctid`. A statement
 * reads with one snapshot, taken before it locks: a key is claimed only when the version it
 * locked is the one its snapshot sees (the same `ctid`). Every change to a key's ops writes its
 * key row in the same transaction, after locking it, so the ops of such a key are seen as they
 * are; a key changed since the snapshot is returned as picked alone (the caller's transactional
 * path claims it).
 */
export const claimSetFunction = (n: SchemaNames): string => `
create or replace function ${n.claimSetFn}(
  ${CLAIM_PARAMS}
) returns setof ${n.claimedType} language plpgsql ${SET_BASED} as $fn$
begin
  if p_n <= 0 then return; end if;
  return query
  with k as (
    select k.op_key, k.token, k.head_seq, k.ctid as c from ${n.keys} k
    where k.queue = p_queue and k.state = 'ready' and k.avail_at <= p_at
    order by k.turn, k.op_key
    limit p_n
    for update skip locked
  ), h as (
    select k.c, k.op_key as picked, k.token + 1 as next_token, o.*
    from k left join lateral (
      select y.* from ${n.ops} y
      where y.queue = p_queue and y.op_key = k.op_key and y.status = 'queued'
        and y.seq >= k.head_seq
        and (select s.ctid from ${n.keys} s where s.queue = p_queue and s.op_key = k.op_key) = k.c
      order by y.seq
      limit 1
    ) as o on true
  ), u as (
    update ${n.keys} as kk
    set state = 'running', running_op = h.id, running_type = h.type, token = h.next_token,
        lease_until = p_lease_until, pending = kk.pending - 1, head_seq = h.seq,
        running_worker = p_worker, running_since = p_at
    from h
    where kk.ctid = h.c and h.id is not null
  )
  select (x).* from (
    select ${claimedRow(n, {
      ...Object.fromEntries(Object.keys(CLAIMED_OP_COLUMNS).map((c) => [c, `h.${c}`])),
      picked: 'h.picked',
      running_since: 'case when h.id is null then null else p_at end',
      token: 'case when h.id is null then null else h.next_token end',
    })} as x
    from h
    offset 0
  ) as r;
end
$fn$`;

/**
 * PostgreSQL: {@link succeedManyRowsFunction} in three statements (its own name,
 * `n.succeedManySetFn`; same signature and rows), ending with {@link claimSetFunction}: the key
 * rows of the successes whose claim still holds its key are locked in key order (two batches
 * cannot deadlock) with their fences checked on the rows as committed; those key rows are then
 * updated by their `ctid`, and the op rows by their ids.
 */
export const succeedManySetFunction = (n: SchemaNames): string => `
create or replace function ${n.succeedManySetFn}(
  ${SUCCEED_MANY_PARAMS}
) returns setof ${n.claimedType} language plpgsql ${SET_BASED} as $fn$
declare
  v_ok integer[];
  v_c tid[];
  v_ops text[];
  v_since bigint[];
  v_notices text[];
  v_n integer;
begin
  select array_agg(u.i order by u.i), array_agg(l.c), array_agg(u.op), array_agg(l.since),
    array_agg(p_notices[u.i]) filter (where p_notices[u.i] is not null),
    count(*) filter (where p_next[u.i])
  into v_ok, v_c, v_ops, v_since, v_notices, v_n
  from (
    select * from unnest(p_keys, p_ops, p_tokens) with ordinality as x(key, op, token, i)
    order by x.key, x.i
  ) as u cross join lateral (
    select kk.ctid as c, kk.running_since as since from ${n.keys} kk
    where kk.queue = p_queue and kk.op_key = u.key and kk.state || '' = 'running'
      and kk.running_op = u.op and kk.token = u.token
    for update
  ) as l;
  if v_ok is not null then
    update ${n.keys} as kk
    set state = case when kk.pending > 0 then 'ready' else 'idle' end,
        running_op = null, running_type = null, avail_at = 0, turn = p_at
    where kk.ctid = any(v_c);
    update ${n.ops} as o
    set status = 'succeeded', result = p_results[array_position(p_ops, o.id::text)], error = null,
        finished_at = p_at, attempts = o.attempts + 1,
        started_at = v_since[array_position(v_ops, o.id::text)],
        token = p_tokens[array_position(p_ops, o.id::text)]
    where o.id = any(v_ops);
    if v_notices is not null then
      perform pg_notify('${n.endsChannel}', x) from unnest(v_notices) as x;
    end if;
  end if;
  return next ${claimedRow(n, { ok: `coalesce(v_ok, '{}')` })};
  if v_n > 0 then
    return query select * from ${n.claimSetFn}(p_queue, v_n, p_at, p_lease_until, p_worker);
  end if;
end
$fn$`;
