// The PL/pgSQL functions of the PostgreSQL backend, each planned once per connection: its hot
// statements as each version wrote them (today's are in `pg-set-functions.ts`). Installed (and
// replaced) by the migrations in `schema.ts`; the function names carry a version so that a changed
// signature is a new function. Each text takes the names of the objects it creates and reads: the
// migrations of 0.1.0 install them under its names, migration `rigging-async-queue-prefix` again
// under today's.
import type { SchemaNames } from './names.js';
import { CLAIMED_OP_COLUMNS, COMPOSITE_ROWS, JSON_ROWS, claimedRow } from './pg-claimed-rows.js';

/** PostgreSQL: the parameters of every claim function (a claim of up to `p_n` keys). */
export const CLAIM_PARAMS =
  'p_queue text, p_n integer, p_at bigint, p_lease_until bigint, p_worker text';

/**
 * PostgreSQL: the parameters of every batch of successes (one array element per success, and the
 * claim it ends with).
 */
export const SUCCEED_MANY_PARAMS = `p_queue text, p_keys text[], p_ops text[], p_tokens integer[], p_results text[],
  p_notices text[], p_next boolean[], p_at bigint, p_lease_until bigint, p_worker text`;

/**
 * PostgreSQL: the claim CTEs of the first functions below: `k` (up to `p_n` ready keys, locked,
 * skipping locked ones; `guard` may add a condition), `h` (their head ops, always found through
 * the `(queue, op_key, status, seq)` index), `u` (those ops, claimed) and `g` (their keys,
 * running). Superseded by {@link claimByKeyFunction} (migration `pg-functions-by-key`).
 */
const claimCteText = (n: SchemaNames, guard: string) => `k as (
    select queue, op_key, token from ${n.keys}
    where queue = p_queue and state = 'ready' and avail_at <= p_at
${guard}    order by turn, op_key
    limit p_n
    for update skip locked
  ), h as (
    select o.id, o.op_key, k.token + 1 as next_token
    from k cross join lateral (
      select o.id, o.op_key from ${n.ops} o
      where o.queue = k.queue and o.op_key = k.op_key and o.status = 'queued'
      order by o.seq
      limit 1
    ) as o
  ), u as (
    update ${n.ops} as o
    set status = 'running', token = h.next_token, attempts = o.attempts + 1,
        worker = p_worker, started_at = p_at
    from h
    where o.id = h.id and o.status = 'queued'
    returning o.*
  ), g as (
    update ${n.keys} as kk
    set state = 'running', running_op = u.id, running_type = u.type, token = u.token,
        lease_until = p_lease_until, pending = kk.pending - 1
    from u
    where kk.queue = p_queue and kk.op_key = u.op_key
    returning kk.op_key
  )
`;

/**
 * PostgreSQL: records a success if the claim still holds its key (fencing token) and claims up
 * to `p_n` (0 or 1) next fair ops in the same statement. One JSON row: `ok` (1 when the claim
 * held), `notified`, `picked` (a key locked for the next claim, or null) and the claimed op's
 * columns (null when the picked key's head could not be claimed here).
 */
export const succeedFunction = (n: SchemaNames): string => `
create or replace function ${n.succeedFn}(
  p_queue text, p_key text, p_op text, p_token integer, p_result text, p_at bigint,
  p_notice text, p_n integer, p_lease_until bigint, p_worker text
) returns setof json language plpgsql as $fn$
begin
  return query
  with fin as (
    update ${n.keys}
    set state = case when pending > 0 then 'ready' else 'idle' end,
        running_op = null, running_type = null, avail_at = 0, turn = p_at
    where queue = p_queue and op_key = p_key and state = 'running'
      and running_op = p_op and token = p_token
    returning op_key
  ), fo as (
    update ${n.ops}
    set status = 'succeeded', result = p_result, error = null, finished_at = p_at
    where id = p_op and exists (select 1 from fin)
    returning id
  ), n as (
    select pg_notify('${n.channel}', p_notice) from fo where p_notice is not null
  ), ${claimCteText(n, '      and exists (select 1 from fin)\n')}  select row_to_json(c) from (
    select (select count(*) from fin) as ok, (select count(*) from n) as notified, x.*
    from (select 1 as one) as one left join (
      select k.op_key as picked, u.* from k left join u on u.op_key = k.op_key
    ) as x on true
  ) as c;
end
$fn$`;

/**
 * PostgreSQL: claims up to `p_n` ready head ops (fairness: oldest turn first). One JSON row per
 * picked key: `picked` and the claimed op's columns (null when its head could not be claimed
 * here).
 */
export const claimFunction = (n: SchemaNames): string => `
create or replace function ${n.claimFn}(
  ${CLAIM_PARAMS}
) returns setof json language plpgsql as $fn$
begin
  return query
  with ${claimCteText(n, '')}  select row_to_json(x) from (
    select k.op_key as picked, u.* from k left join u on u.op_key = k.op_key
  ) as x;
end
$fn$`;

/**
 * PostgreSQL: claims up to `p_n` ready head ops, fairly (oldest turn first, in the order of the
 * `(queue, state, turn, op_key)` index), one key at a time: each statement looks a key row up by
 * its primary key and the head op through the `(queue, op_key, status, seq)` index, whatever the
 * planner's statistics say. (The set-based version joined key rows on `op_key`, which on fresh,
 * not yet analyzed tables was planned as a scan of every key of the queue per statement.) One
 * JSON row per picked key: `picked` and the claimed op's columns (none when its head could not be
 * claimed here). Replaces the body of {@link claimFunction}; same signature and rows.
 */
export const claimByKeyFunction = (n: SchemaNames): string => `
create or replace function ${n.claimFn}(
  ${CLAIM_PARAMS}
) returns setof json language plpgsql as $fn$
declare
  r record;
  o ${n.ops};
begin
  if p_n <= 0 then return; end if;
  for r in
    select k.op_key, k.token from ${n.keys} k
    where k.queue = p_queue and k.state = 'ready' and k.avail_at <= p_at
    order by k.turn, k.op_key
    limit p_n
    for update skip locked
  loop
    update ${n.ops} as x
    set status = 'running', token = r.token + 1, attempts = x.attempts + 1,
        worker = p_worker, started_at = p_at
    where x.id = (
      select y.id from ${n.ops} y
      where y.queue = p_queue and y.op_key = r.op_key and y.status = 'queued'
      order by y.seq
      limit 1
    ) and x.status = 'queued'
    returning x.* into o;
    if found then
      update ${n.keys} as kk
      set state = 'running', running_op = o.id, running_type = o.type, token = o.token,
          lease_until = p_lease_until, pending = kk.pending - 1
      where kk.queue = p_queue and kk.op_key = r.op_key;
      return next (to_jsonb(o) || jsonb_build_object('picked', r.op_key))::json;
    else
      return next json_build_object('picked', r.op_key);
    end if;
  end loop;
end
$fn$`;

/**
 * PostgreSQL: records a batch of successes, each only if its claim still holds its key (fencing
 * token per op), then claims as many next fair ops as there were accepted successes that asked
 * for one (`p_next`). Key rows are locked in key order (two batches cannot deadlock) and looked up
 * by primary key. The first JSON row is `{ ok: [ordinals of the accepted successes, 1-based] }`;
 * the further rows are those of the claim function. The claim sees the keys just finished
 * (ready again, newest turn).
 */
export const succeedManyFunction = (n: SchemaNames): string => `
create or replace function ${n.succeedManyFn}(
  ${SUCCEED_MANY_PARAMS}
) returns setof json language plpgsql as $fn$
declare
  v_i integer;
  v_state text;
  v_op text;
  v_token integer;
  v_ok integer[] := '{}';
  v_n integer := 0;
begin
  for v_i in
    select i from generate_subscripts(p_keys, 1) as i order by p_keys[i], i
  loop
    select k.state, k.running_op, k.token into v_state, v_op, v_token
    from ${n.keys} k
    where k.queue = p_queue and k.op_key = p_keys[v_i]
    for update;
    if found and v_state = 'running' and v_op = p_ops[v_i] and v_token = p_tokens[v_i] then
      update ${n.keys} as kk
      set state = case when kk.pending > 0 then 'ready' else 'idle' end,
          running_op = null, running_type = null, avail_at = 0, turn = p_at
      where kk.queue = p_queue and kk.op_key = p_keys[v_i];
      update ${n.ops} as o
      set status = 'succeeded', result = p_results[v_i], error = null, finished_at = p_at
      where o.id = p_ops[v_i];
      if p_notices[v_i] is not null then
        perform pg_notify('${n.channel}', p_notices[v_i]);
      end if;
      v_ok := v_ok || v_i;
      if p_next[v_i] then v_n := v_n + 1; end if;
    end if;
  end loop;
  return next json_build_object('ok', v_ok);
  if v_n > 0 then
    return query select * from ${n.claimFn}(p_queue, v_n, p_at, p_lease_until, p_worker);
  end if;
end
$fn$`;

/**
 * PostgreSQL: stores an op (no idempotency check here): one upsert counts it in on its key row
 * (readying an idle key; the row lock serializes enqueues of one key), one insert stores it, and
 * workers are woken (NOTIFY) when the key was idle. Returns `{ state, next_seq }` of the key.
 * A function, so that the statement is planned once per connection, not on every enqueue.
 */
export const enqueueFunction = (n: SchemaNames): string => `
create or replace function ${n.enqueueFn}(
  p_queue text, p_key text, p_id text, p_type text, p_payload text, p_idem text,
  p_announce integer, p_at bigint
) returns json language plpgsql as $fn$
declare
  v_state text;
  v_seq bigint;
  v_pending integer;
begin
  insert into ${n.keys} as kk (queue, op_key, state, next_seq, pending, avail_at, turn)
  values (p_queue, p_key, 'ready', 1, 1, 0, p_at)
  on conflict (queue, op_key) do update set
    next_seq = kk.next_seq + 1,
    pending = kk.pending + 1,
    avail_at = case when kk.state = 'idle' then 0 else kk.avail_at end,
    turn = case when kk.state = 'idle' then p_at else kk.turn end,
    state = case when kk.state = 'idle' then 'ready' else kk.state end
  returning kk.state, kk.next_seq, kk.pending into v_state, v_seq, v_pending;
  insert into ${n.ops} (id, queue, op_key, seq, type, payload, status, attempts, expiries, token,
                      idempotency_key, announce, created_at)
  values (p_id, p_queue, p_key, v_seq, p_type, p_payload, 'queued', 0, 0, 0, p_idem, p_announce,
          p_at);
  if v_state = 'ready' and v_pending = 1 then
    perform pg_notify('${n.channel}', 'n:' || p_queue);
  end if;
  return json_build_object('state', v_state, 'next_seq', v_seq);
end
$fn$`;

/**
 * The text of a claim from each picked key's head (see {@link claimFromHeadFunction}): up to
 * `p_n` ready keys in fair order, locked (skipping locked ones), each given to `claimed`, the
 * statements that claim its head op into `o` and return its row; a key whose head it could not
 * claim returns `{ picked }` alone. `shape`: the form of its rows.
 */
const claimFromHeadLoop = (n: SchemaNames, claimed: string, shape = JSON_ROWS): string => `
create or replace function ${shape.claimFn(n)}(
  ${CLAIM_PARAMS}
) returns setof ${shape.returns(n)} language plpgsql as $fn$
declare
  r record;
  o ${n.ops};
begin
  if p_n <= 0 then return; end if;
  for r in
    select k.op_key, k.token, k.head_seq from ${n.keys} k
    where k.queue = p_queue and k.state = 'ready' and k.avail_at <= p_at
    order by k.turn, k.op_key
    limit p_n
    for update skip locked
  loop
${claimed}    else
      return next ${shape.pickedOnly(n)};
    end if;
  end loop;
end
$fn$`;

/**
 * PostgreSQL: {@link claimByKeyFunction} with the head op found from the key's `head_seq` on
 * (same signature and rows). Every claim moves an op out of `queued`, which leaves a dead entry
 * in the `(queue, op_key, status, seq)` index until the table is vacuumed; looking for the head
 * from the lowest seq walked past every such entry of the key, and so grew with the ops the key
 * had run (about 30 buffers per claim after 70 ops, the costliest statement of a drain). The
 * look-up now starts at `head_seq`, the seq of the key's last claimed op, below which no op is
 * queued (an op only goes back to `queued` when its own claim gives it back), and the claim
 * records the new one.
 */
export const claimFromHeadFunction = (n: SchemaNames): string =>
  claimFromHeadLoop(
    n,
    `    update ${n.ops} as x
    set status = 'running', token = r.token + 1, attempts = x.attempts + 1,
        worker = p_worker, started_at = p_at
    where x.id = (
      select y.id from ${n.ops} y
      where y.queue = p_queue and y.op_key = r.op_key and y.status = 'queued'
        and y.seq >= r.head_seq
      order by y.seq
      limit 1
    ) and x.status = 'queued'
    returning x.* into o;
    if found then
      update ${n.keys} as kk
      set state = 'running', running_op = o.id, running_type = o.type, token = o.token,
          lease_until = p_lease_until, pending = kk.pending - 1, head_seq = o.seq
      where kk.queue = p_queue and kk.op_key = r.op_key;
      return next (to_jsonb(o) || jsonb_build_object('picked', r.op_key))::json;
`,
  );

/**
 * The text of the fenced batch of successes, with `running` as its "key is running" condition
 * and `channel` the one its ends are announced on. With `onKey`, the attempt ran on the key's
 * row (see {@link keyRunsOpClaimFunction}): the op's write also counts it, with its start and
 * token. `shape`: the form of its rows, and the claim function it ends with.
 */
const succeedManyFenced = (
  n: SchemaNames,
  running: string,
  channel = n.channel,
  onKey = false,
  shape = JSON_ROWS,
): string => `
create or replace function ${shape.succeedManyFn(n)}(
  ${SUCCEED_MANY_PARAMS}
) returns setof ${shape.returns(n)} language plpgsql as $fn$
declare
  v_i integer;
  v_ok integer[] := '{}';
  v_n integer := 0;${onKey ? '\n  v_since bigint;' : ''}
begin
  for v_i in
    select i from generate_subscripts(p_keys, 1) as i order by p_keys[i], i
  loop
    update ${n.keys} as kk
    set state = case when kk.pending > 0 then 'ready' else 'idle' end,
        running_op = null, running_type = null, avail_at = 0, turn = p_at
    where kk.queue = p_queue and kk.op_key = p_keys[v_i] and ${running}
      and kk.running_op = p_ops[v_i] and kk.token = p_tokens[v_i]${onKey ? '\n    returning kk.running_since into v_since' : ''};
    if found then
      update ${n.ops} as o
      set status = 'succeeded', result = p_results[v_i], error = null, finished_at = p_at${onKey ? ',\n          attempts = o.attempts + 1, started_at = v_since, token = p_tokens[v_i]' : ''}
      where o.id = p_ops[v_i];
      if p_notices[v_i] is not null then
        perform pg_notify('${channel}', p_notices[v_i]);
      end if;
      v_ok := v_ok || v_i;
      if p_next[v_i] then v_n := v_n + 1; end if;
    end if;
  end loop;
  return next ${shape.ok(n)};
  if v_n > 0 then
    return query select * from ${shape.claimFn(n)}(p_queue, v_n, p_at, p_lease_until, p_worker);
  end if;
end
$fn$`;

/**
 * PostgreSQL: {@link succeedManyFunction} with each success's fence checked by the update of its
 * key row itself (same signature and rows): one statement per success instead of a locking read
 * and an update. Under READ COMMITTED an update that waited for the row's lock checks its
 * condition again on the row as committed, so a success whose claim was taken over meanwhile
 * changes nothing, as before; key rows are still locked in key order.
 */
export const succeedManyFencedFunction = (n: SchemaNames): string =>
  succeedManyFenced(n, `kk.state = 'running'`);

/**
 * PostgreSQL: {@link succeedManyFencedFunction} with the key row always found by its primary key
 * (same signature and rows). Its condition `state = 'running'` matched the predicate of the
 * partial index of running keys, which the planner often took (the index looks small while the
 * table's statistics say few keys run): each success then read the index entry of every running
 * key of the queue. The same condition is now written `state || '' = 'running'`, which no index
 * predicate matches.
 */
export const succeedManyByPrimaryKeyFunction = (n: SchemaNames): string =>
  succeedManyFenced(n, `kk.state || '' = 'running'`);

/**
 * PostgreSQL: {@link succeedManyByPrimaryKeyFunction} announcing ends on their own channel
 * (same signature and rows), which only instances waiting for an op listen to: workers are no
 * longer handed every end.
 */
export const succeedManyEndsChannelFunction = (n: SchemaNames): string =>
  succeedManyFenced(n, `kk.state || '' = 'running'`, n.endsChannel);

/**
 * PostgreSQL: {@link claimFromHeadFunction} writing the key row alone (same signature and rows):
 * an op runs on its key's row (worker, start, token, lease), and its own row keeps `queued` until
 * the attempt ends, so a claim writes one row version where it wrote two (the op's, with an entry
 * in its primary key). Each row it returns is the op's row with the claim's token and start
 * (`running_since`), which the caller shows as running (`claimedAt`).
 */
export const keyRunsOpClaimFunction = (n: SchemaNames): string =>
  keyRunsOpClaim(
    n,
    `(to_jsonb(o) || jsonb_build_object(
        'picked', r.op_key, 'token', r.token + 1, 'running_since', p_at))::json`,
  );

/**
 * The text of {@link keyRunsOpClaimFunction}, returning `row` for each op it claimed, in the
 * form `shape` gives every row.
 */
const keyRunsOpClaim = (n: SchemaNames, row: string, shape = JSON_ROWS): string =>
  claimFromHeadLoop(
    n,
    `    select * into o from ${n.ops} y
    where y.queue = p_queue and y.op_key = r.op_key and y.status = 'queued'
      and y.seq >= r.head_seq
    order by y.seq
    limit 1;
    if found then
      update ${n.keys} as kk
      set state = 'running', running_op = o.id, running_type = o.type, token = r.token + 1,
          lease_until = p_lease_until, pending = kk.pending - 1, head_seq = o.seq,
          running_worker = p_worker, running_since = p_at
      where kk.queue = p_queue and kk.op_key = r.op_key;
      return next ${row};
`,
    shape,
  );

/**
 * PostgreSQL: {@link keyRunsOpClaimFunction} returning rows of the composite type
 * `n.claimedType` instead of JSON (its own name, `n.claimRowsFn`): PostgreSQL no longer builds a
 * JSON object of every column of each claimed op, nor the client parses one.
 */
export const claimRowsFunction = (n: SchemaNames): string =>
  keyRunsOpClaim(
    n,
    claimedRow(n, {
      ...Object.fromEntries(Object.keys(CLAIMED_OP_COLUMNS).map((c) => [c, `o.${c}`])),
      picked: 'r.op_key',
      running_since: 'p_at',
      token: 'r.token + 1',
    }),
    COMPOSITE_ROWS,
  );

/**
 * PostgreSQL: {@link succeedManyEndsChannelFunction} for ops that run on their key's row (same
 * signature and rows): the op's one write records the attempt (counted, with its start from the
 * key row and its token) along with the success.
 */
export const keyRunsOpSucceedManyFunction = (n: SchemaNames): string =>
  succeedManyFenced(n, `kk.state || '' = 'running'`, n.endsChannel, true);

/**
 * PostgreSQL: {@link keyRunsOpSucceedManyFunction} returning rows of the composite type
 * `n.claimedType` (its own name, `n.succeedManyRowsFn`), and ending with
 * {@link claimRowsFunction}: the first row has `ok` alone.
 */
export const succeedManyRowsFunction = (n: SchemaNames): string =>
  succeedManyFenced(n, `kk.state || '' = 'running'`, n.endsChannel, true, COMPOSITE_ROWS);
