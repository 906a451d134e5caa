import { hostname } from 'node:os';
import type { Clock } from '@rigging/core';
import {
  prepareQuery,
  sendWithCommit,
  sql,
  type Database,
  type Expression,
  type Kysely,
  type PreparedQuery,
} from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';
import { journal, type JournalEntry } from './journal.js';

/** Who applies an effect, and under which claim. */
export interface EffectClaim {
  /** The op id. */
  op: string;
  /** The container key. */
  key: string;
  /** The queue's attempt number of this claim. */
  attempt: number;
  /** The fencing token of this claim (strictly increasing per key across claims). */
  token: number;
}

/**
 * A statement's part written once and run with new values: `build` places each of `params` as a
 * value only (see `prepareQuery` of `@rigging/sql`) and is the same function from call to call
 * (defined once, not per call): on PostgreSQL the witness's statement around it is built once
 * per `build` and prepared. Names that begin with `_` are the witness's own values.
 */
export interface Bound<Build, P extends object> {
  build: Build;
  params: P;
}

/**
 * PostgreSQL: an effect's write as one data-modifying statement (an `insert … select … from
 * <from>`, or an `update`/`delete` with `exists (select 1 from <from>)`) that writes only when
 * CTE `from` has a row, with the values `p` (see {@link Bound}).
 */
export type GatedWrite<P extends object = any> = Bound<
  (from: string, p: P) => Expression<unknown>,
  P
>;

/** A scalar expression (such as a one-column subquery) of the values `p` (see {@link Bound}). */
export type ScalarRead<V = unknown, P extends object = any> = Bound<
  (db: Kysely<MinicloudTables>, p: P) => Expression<V>,
  P
>;

/** What {@link Witness.apply} did. */
export type EffectOutcome =
  | { kind: 'applied'; seq: number }
  | { kind: 'already-applied' }
  | { kind: 'refused'; highest: number };

/**
 * The refusal of a statement sent with a commit ({@link Witness.applyWithCommit},
 * {@link Witness.fenceWithCommit}): the error code it names (`minicloud.container_fenced`, …)
 * and what it says; undefined for any other error.
 */
export function refusalOf(error: unknown): { code: string; message: string } | undefined {
  const e = error as { code?: unknown; message?: unknown } | null;
  if (e?.code !== 'MC409' || typeof e.message !== 'string') return undefined;
  const m = /^(minicloud\.[a-z_]+): ([\s\S]*)$/.exec(e.message);
  return m ? { code: m[1]!, message: m[2]! } : { code: 'minicloud.refused', message: e.message };
}

/** The host an effect was applied from: the cluster sets `MINICLOUD_HOST` per simulated host. */
function hostLabel(): string {
  return process.env.MINICLOUD_HOST ?? hostname();
}

/** The witness's own values in its PostgreSQL statements (stand-ins while one is prepared). */
interface Own {
  _key: string;
  _token: number;
  _op: string;
  _attempt: number;
  _host: string;
  _pid: number;
  _at: number;
  _kind?: string;
  _ref?: string;
  _refusal?: string;
  _missing?: string;
}

/** PostgreSQL: a CTE that inserts the journal row of `p` once per row of CTE `from`. */
const journalFrom = (from: string, p: Own) =>
  sql`, j as (insert into "minicloud_journal" ("kind", "ref", "pid", "at")
    select ${p._kind}, ${p._ref}, ${p._pid}::integer, ${p._at}::bigint from ${sql.table(from)})`;

/**
 * PostgreSQL: the fence's CTEs (see {@link Witness.fence}): `f`, the upsert that moves the key's
 * token only upwards (a row when the claim holds), then the journal row, from `f`.
 */
const fenceCtes = (p: Own, journal: boolean) =>
  sql`with f as (insert into "minicloud_effect_keys" ("op_key", "token", "seq")
      values (${p._key}, ${p._token}, 0)
      on conflict ("op_key") do update set "token" = excluded."token"
      where "minicloud_effect_keys"."token" <= excluded."token"
      returning "token")${journal ? journalFrom('f', p) : sql``}`;

/** PostgreSQL: the fence and `read` (see {@link Witness.fenceAndRead}): no row when stale. */
const fenceStatement = (p: Own, journal: boolean, read: Expression<unknown> | undefined) =>
  sql`${fenceCtes(p, journal)} select ${read ?? sql`null`} as v from f`;

/**
 * PostgreSQL: the fence sent with a commit (see {@link Witness.fenceWithCommit}): refused when
 * the claim is stale (`f` has no row), else when `required` is null.
 */
const fenceCheck = (p: Own, journal: boolean, required: Expression<unknown> | undefined) =>
  sql`${fenceCtes(p, journal)}
    select case when not exists (select 1 from f) then minicloud_refuse(${p._refusal})${
      required ? sql` when ${required} is null then minicloud_refuse(${p._missing})` : sql``
    } else 1 end as ok`;

/**
 * PostgreSQL: an effect's statement: `k`, the upsert of the key's row (one row, its new `seq`,
 * when the effect is applied), then the effect's row, the journal row and the effect's own
 * `write`, all from `k`, then `tail`.
 */
const effectStatement = (
  p: Own,
  journal: boolean,
  write: Expression<unknown> | undefined,
  tail: Expression<unknown>,
) =>
  sql`with k as (insert into "minicloud_effect_keys" ("op_key", "token", "seq", "last_op")
      values (${p._key}, ${p._token}, 1, ${p._op})
      on conflict ("op_key") do update set "token" = excluded."token",
        "seq" = "minicloud_effect_keys"."seq" + 1, "last_op" = excluded."last_op"
      where "minicloud_effect_keys"."token" <= excluded."token"
        and "minicloud_effect_keys"."last_op" is distinct from ${p._op}
      returning "seq"),
    e as (insert into "minicloud_effects"
        ("op_id", "op_key", "attempt", "host", "pid", "token", "at", "seq", "accepted", "reason")
      select ${p._op}, ${p._key}, ${p._attempt}::integer, ${p._host}, ${p._pid}::integer,
        ${p._token}::integer, ${p._at}::bigint, k."seq", 1, null from k)${
          journal ? journalFrom('k', p) : sql``
        }${write ? sql`, w as (${write})` : sql``}
    ${tail}`;

/**
 * PostgreSQL: the check sent after an effect's statement (see {@link Witness.applyWithCommit}):
 * the journal row when the key's last effect is this op's under a token not above the claim's,
 * else the refusal (SQLSTATE `MC409`).
 */
const heldCheck = (journal: boolean) =>
  prepareQuery(
    (_db, p: Own) => sql`with a as (select 1 as one from "minicloud_effect_keys"
      where "op_key" = ${p._key} and "last_op" = ${p._op} and "token" <= ${p._token}::integer)${
        journal ? journalFrom('a', p) : sql``
      }
    select case when exists (select 1 from a) then 1
      else minicloud_refuse(${p._refusal}) end as ok`,
  );
const HELD_CHECK = [heldCheck(false), heldCheck(true)] as const;

/** Stands for "no read" or "no write" where prepared statements are looked up by `build`. */
const NONE = {};

/**
 * The PostgreSQL statements prepared for each caller's `build` (or {@link NONE}), by variant:
 * a caller's part and the witness's around it are built once, then run with new values.
 */
const preparedByBuild = new WeakMap<object, Map<string, PreparedQuery<any, any>>>();

function preparedFor(
  build: object,
  variant: string,
  make: () => PreparedQuery<any, any>,
): PreparedQuery<any, any> {
  let variants = preparedByBuild.get(build);
  if (!variants) preparedByBuild.set(build, (variants = new Map()));
  let query = variants.get(variant);
  if (!query) variants.set(variant, (query = make()));
  return query;
}

/**
 * The simulated container runtime's fenced resource and its witness, independent of the task
 * engine's log and of the queue's op rows. Every effect goes through {@link apply}, which in the
 * transaction that applies it: locks the key's row in `minicloud_effect_keys`; refuses the effect
 * when its fencing token is lower than the highest the key has seen (as a real fenced resource
 * would; the refusal is then recorded by {@link refused}); otherwise takes the key's next
 * sequence number (and the key's row its op id), records the effect in `minicloud_effects` and
 * applies it. A verdict reads these tables directly: an op with two accepted effects was applied
 * twice, per-key sequence numbers give the order the effects really happened in, and refused rows
 * are stale writes that fencing stopped.
 */
export class Witness {
  readonly #database: Database<MinicloudTables>;
  readonly #clock: Clock;
  /** The host its effects are recorded from (read once: every statement names it). */
  readonly #host = hostLabel();

  constructor(database: Database<MinicloudTables>, clock: Clock) {
    this.#database = database;
    this.#clock = clock;
  }

  /** The key's token as the jobboard holds it now (what a buggy writer would re-read late). */
  async currentKeyToken(key: string): Promise<number | undefined> {
    const { rows } = await sql<{ token: number | string }>`
      select token from rigging_async_queue_keys where op_key = ${key}
    `.execute(this.#database.db);
    return rows.length === 0 ? undefined : Math.max(...rows.map((r) => Number(r.token)));
  }

  /** The key's last effect sequence number (0 before the first). */
  async lastSeq(key: string): Promise<number> {
    const row = await this.#database.db
      .selectFrom('minicloud_effect_keys')
      .select('seq')
      .where('op_key', '=', key)
      .executeTakeFirst();
    return row ? Number(row.seq) : 0;
  }

  async #ensureKey(key: string, db: Kysely<MinicloudTables> = this.#database.db): Promise<void> {
    const insert = db.insertInto('minicloud_effect_keys').values({ op_key: key, token: 0, seq: 0 });
    await (
      this.#database.dialect === 'mysql'
        ? insert.ignore()
        : insert.onConflict((oc) => oc.column('op_key').doNothing())
    ).execute();
  }

  /**
   * The key's row, created when missing and locked until `trx` ends: one upsert that returns it
   * (SQLite serializes write transactions; PostgreSQL locks the row it updates); on MySQL an
   * insert that ignores an existing row, then a locking read.
   */
  async #lockedKey(trx: Kysely<MinicloudTables>, key: string) {
    if (this.#database.dialect === 'mysql') {
      await this.#ensureKey(key, trx);
      return trx
        .selectFrom('minicloud_effect_keys')
        .select(['token', 'seq'])
        .where('op_key', '=', key)
        .forUpdate()
        .executeTakeFirstOrThrow();
    }
    return trx
      .insertInto('minicloud_effect_keys')
      .values({ op_key: key, token: 0, seq: 0 })
      .onConflict((oc) =>
        oc.column('op_key').doUpdateSet((eb) => ({ seq: eb.ref('minicloud_effect_keys.seq') })),
      )
      .returning(['token', 'seq'])
      .executeTakeFirstOrThrow();
  }

  /**
   * A claim starts running on its key, with `trx` (the caller's transaction): the key's highest
   * token becomes the claim's, so that a later write by an earlier claim is refused. False when a
   * higher token was already seen (this claim is stale; nothing is written). `record` is a
   * journal row written with the fence. One upsert that moves the token only upwards, with the
   * journal row in the same statement on PostgreSQL (MySQL: the locked row is read, then updated).
   */
  async fence(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    record?: JournalEntry,
  ): Promise<boolean> {
    return (await this.fenceAndRead(trx, claim, record)) !== undefined;
  }

  /**
   * {@link fence}, and `read` (a scalar expression, such as a one-column subquery) read with it:
   * on PostgreSQL in the fence's own statement (one round trip for both), elsewhere by a statement
   * after it. Undefined when the claim is stale (nothing is written or read). The read sees what
   * had committed when the statement began: every effect of an earlier claim of the key, since
   * a key's claims run one after the other and an earlier claim's late write is refused.
   */
  async fenceAndRead<V>(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    record?: JournalEntry,
    read?: ScalarRead<V>,
  ): Promise<{ value: V | null } | undefined> {
    const dialect = this.#database.dialect;
    if (dialect === 'postgres') {
      const query = preparedFor(read?.build ?? NONE, record ? 'journal' : '', () =>
        prepareQuery((db, p: Own) => fenceStatement(p, record !== undefined, read?.build(db, p))),
      );
      const { rows } = await query.execute(trx, { ...read?.params, ...this.#own(claim, record) });
      return rows[0] && { value: (rows[0] as { v: V | null }).v };
    }
    if (dialect === 'mysql') {
      const row = await this.#lockedKey(trx, claim.key);
      if (claim.token < Number(row.token)) return undefined;
      await trx
        .updateTable('minicloud_effect_keys')
        .set({ token: claim.token })
        .where('op_key', '=', claim.key)
        .execute();
    } else {
      const upsert = trx
        .insertInto('minicloud_effect_keys')
        .values({ op_key: claim.key, token: claim.token, seq: 0 })
        .onConflict((oc) =>
          oc
            .column('op_key')
            .doUpdateSet((eb) => ({ token: eb.ref('excluded.token') }))
            .where('minicloud_effect_keys.token', '<=', (eb) => eb.ref('excluded.token')),
        )
        .returning('token');
      if ((await upsert.executeTakeFirst()) === undefined) return undefined;
    }
    await this.#journal(trx, record);
    if (read === undefined) return { value: null };
    const { rows } = await sql<{
      v: V | null;
    }>`select ${read.build(trx, read.params)} as v`.execute(trx);
    return { value: rows[0]?.v ?? null };
  }

  /**
   * PostgreSQL: {@link fence} sent with the commit of `trx` (`sendWithCommit`: in the commit's
   * round trip, with the transaction's last statement) instead of run now, so that starting an
   * op takes no round trip of its own. One statement: the fence and `record`, then, if the claim
   * is stale, a refusal with `stale`; otherwise, if `required.read` (a scalar read) is null, a
   * refusal with `required.missing`. A refusal fails the statement with SQLSTATE `MC409` and that
   * message (see {@link refusalOf}), which rolls the transaction back with nothing of it written.
   */
  async fenceWithCommit(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    record: JournalEntry | undefined,
    refusals: { stale: string; required?: { read: ScalarRead; missing: string } | undefined },
  ): Promise<void> {
    const { stale, required } = refusals;
    const read = required?.read;
    const query = preparedFor(read?.build ?? NONE, record ? 'check journal' : 'check', () =>
      prepareQuery((db, p: Own) => fenceCheck(p, record !== undefined, read?.build(db, p))),
    );
    const own = { ...read?.params, ...this.#own(claim, record), _refusal: stale };
    if (required) own._missing = required.missing;
    await sendWithCommit(trx, query.bind(trx, own));
  }

  /** Writes `record`, if any, with `trx`. */
  async #journal(trx: Kysely<MinicloudTables>, record: JournalEntry | undefined): Promise<void> {
    if (record) await journal(trx, this.#clock, record.kind, record.ref);
  }

  /** The witness's own values of `claim` (and `record`) in its PostgreSQL statements. */
  #own(claim: EffectClaim, record?: JournalEntry): Own {
    return {
      _key: claim.key,
      _token: claim.token,
      _op: claim.op,
      _attempt: claim.attempt,
      _host: this.#host,
      _pid: process.pid,
      _at: this.#clock.now(),
      ...(record ? { _kind: record.kind, _ref: record.ref } : {}),
    };
  }

  /**
   * Applies `write` as the effect of `claim`, witnessed (see the class), with `trx` (the caller's
   * transaction, which commits or rolls back the effect with whatever else it holds). `record` is
   * a journal row written with `trx` when the effect is applied or found already applied (not
   * when it is refused): the caller's own record of it. `idempotent: false` skips the check that
   * the op's effect is not applied yet (only sabotage runs do that). A refusal writes nothing: the
   * caller records it with {@link refused} once its transaction has rolled back.
   *
   * `statement` (PostgreSQL): the same write as one data-modifying statement that writes only
   * when the CTE it is given (the effect's key row) has a row; it then runs inside the effect's
   * own statement, in place of `write` (one round trip for both). Elsewhere `write` runs.
   */
  async apply(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    write: (trx: Kysely<MinicloudTables>) => Promise<void>,
    options: { idempotent?: boolean; record?: JournalEntry; statement?: GatedWrite } = {},
  ): Promise<EffectOutcome> {
    const { record } = options;
    if (this.#database.dialect === 'postgres' && options.idempotent !== false) {
      return this.#applyPostgres(trx, claim, write, record, options.statement);
    }
    const row = await this.#lockedKey(trx, claim.key);
    const highest = Number(row.token);
    if (claim.token < highest) return { kind: 'refused', highest };
    if (options.idempotent !== false) {
      const done = await trx
        .selectFrom('minicloud_effects')
        .select('op_id')
        .where('op_id', '=', claim.op)
        .where('accepted', '=', 1)
        .executeTakeFirst();
      if (done) {
        await this.#journal(trx, record);
        return { kind: 'already-applied' };
      }
    }
    const seq = Number(row.seq) + 1;
    const key = trx
      .updateTable('minicloud_effect_keys')
      .set({ token: claim.token, seq, last_op: claim.op })
      .where('op_key', '=', claim.key);
    const effect = trx
      .insertInto('minicloud_effects')
      .values({ ...this.#effect(claim), seq, accepted: 1, reason: null });
    await key.execute();
    await effect.execute();
    await write(trx);
    await this.#journal(trx, record);
    return { kind: 'applied', seq };
  }

  /**
   * PostgreSQL: the key's row, the effect's row and `record` in one statement — an upsert that
   * takes the key's next sequence number only if the claim's token is not lower than the key's
   * and the key's last effect is not this op's (both checked on the row it locks, as committed
   * when the lock is granted), with the effect and journal rows inserted from its result. When it
   * changed nothing, the key's row (locked by it) tells a refusal from an effect already applied.
   * An op's effect can only be applied already if it is the key's last: the key's ops run in
   * order, and each claim of a key has a higher token than the claims before it. With
   * `statement`, the effect's own write is in the same statement too, gated on the same result.
   */
  async #applyPostgres(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    write: (trx: Kysely<MinicloudTables>) => Promise<void>,
    record: JournalEntry | undefined,
    statement: GatedWrite | undefined,
  ): Promise<EffectOutcome> {
    const query = preparedFor(statement?.build ?? NONE, record ? 'apply journal' : 'apply', () =>
      prepareQuery((_db, p: Own) =>
        effectStatement(
          p,
          record !== undefined,
          statement?.build('k', p),
          sql`select "seq" from k`,
        ),
      ),
    );
    const { rows } = await query.execute(trx, {
      ...statement?.params,
      ...this.#own(claim, record),
    });
    if (rows[0]) {
      if (!statement) await write(trx);
      return { kind: 'applied', seq: Number((rows[0] as { seq: number | string }).seq) };
    }
    const highest = await this.highestToken(claim.key, trx);
    if (claim.token < highest) return { kind: 'refused', highest };
    await this.#journal(trx, record);
    return { kind: 'already-applied' };
  }

  /**
   * PostgreSQL: {@link apply} with `statement` as the effect's write, sent with the commit of
   * `trx` (`sendWithCommit`: in the commit's round trip, with the transaction's last statement)
   * instead of run now, so that nothing of it is read before the commit. Two statements: the
   * effect's, as {@link apply} runs it (it changes nothing unless the claim's token is not lower
   * than the key's and the key's last effect is not this op's), then one that reads the key's row
   * as it then stands (a statement of its own, so it sees what committed while the first waited
   * for the row's lock): if the key's last effect is this op's under a token not above the
   * claim's, the effect was applied (now or before) and `record` is written; otherwise the
   * effect is refused, and the statement fails with SQLSTATE `MC409` ({@link refusalOf}),
   * which rolls the transaction back: its caller then reads the key's highest token and records
   * the refusal with {@link refused}.
   */
  async applyWithCommit(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    statement: GatedWrite,
    record?: JournalEntry,
  ): Promise<void> {
    const own = this.#own(claim, record);
    const effect = preparedFor(statement.build, 'with commit', () =>
      prepareQuery((_db, p: Own) =>
        effectStatement(p, false, statement.build('k', p), sql`select 1 as one`),
      ),
    );
    await sendWithCommit(trx, effect.bind(trx, { ...statement.params, ...own }));
    own._refusal = `minicloud.container_fenced: ${claim.op} on ${claim.key}, token ${claim.token}`;
    await sendWithCommit(trx, HELD_CHECK[record ? 1 : 0].bind(trx, own));
  }

  /** The key's highest token (0 before its first claim). */
  async highestToken(
    key: string,
    db: Kysely<MinicloudTables> = this.#database.db,
  ): Promise<number> {
    const row = await db
      .selectFrom('minicloud_effect_keys')
      .select('token')
      .where('op_key', '=', key)
      .executeTakeFirst();
    return row ? Number(row.token) : 0;
  }

  /** Records that `claim`'s effect was refused, the key having seen `highest` (its own transaction). */
  async refused(claim: EffectClaim, highest: number): Promise<void> {
    await this.#database.db
      .insertInto('minicloud_effects')
      .values({
        ...this.#effect(claim),
        seq: null,
        accepted: 0,
        reason: `stale token (highest ${highest})`,
      })
      .execute();
  }

  #effect(claim: EffectClaim) {
    return {
      op_id: claim.op,
      op_key: claim.key,
      attempt: claim.attempt,
      host: this.#host,
      pid: process.pid,
      token: claim.token,
      at: this.#clock.now(),
    };
  }

  /**
   * Takes the one ticket of a sabotage mode for the whole database: true for the first caller
   * only, so a self-test run injects its fault exactly once whatever the number of workers.
   */
  async sabotageTicket(mode: string): Promise<boolean> {
    const key = `sabotage:${mode}`;
    await this.#ensureKey(key);
    const result = await this.#database.db
      .updateTable('minicloud_effect_keys')
      .set({ seq: 1 })
      .where('op_key', '=', key)
      .where('seq', '=', 0)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }
}
