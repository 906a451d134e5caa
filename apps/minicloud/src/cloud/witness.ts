import { hostname } from 'node:os';
import type { Clock } from '@rigging/core';
import { sendWithCommit, sql, type Database, type Expression, type Kysely } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';
import { journal, journalRow, type JournalEntry } from './journal.js';

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
 * PostgreSQL: an effect's write as one data-modifying statement (an `insert … select … from
 * <from>`, or an `update`/`delete` with `exists (select 1 from <from>)`) that writes only when
 * CTE `from` has a row.
 */
export type GatedWrite = (from: string) => Expression<unknown>;

/** What {@link Witness.apply} did. */
export type EffectOutcome =
  | { kind: 'applied'; seq: number }
  | { kind: 'already-applied' }
  | { kind: 'refused'; highest: number };

/** Whether `error` is the refusal of an effect sent with a commit ({@link Witness.applyWithCommit}). */
export const isEffectRefused = (error: unknown): boolean =>
  (error as { code?: unknown } | null)?.code === 'MC409';

/** The host an effect was applied from: the cluster sets `MINICLOUD_HOST` per simulated host. */
function hostLabel(): string {
  return process.env.MINICLOUD_HOST ?? hostname();
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
    read?: Expression<V>,
  ): Promise<{ value: V | null } | undefined> {
    const dialect = this.#database.dialect;
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
      if (dialect === 'postgres') {
        const { rows } = await sql<{ v: V | null }>`with f as (${upsert})${
          record ? this.#journalFrom('f', record) : sql``
        } select ${read ?? sql`null`} as v from f`.execute(trx);
        return rows[0] && { value: rows[0].v };
      }
      if ((await upsert.executeTakeFirst()) === undefined) return undefined;
    }
    await this.#journal(trx, record);
    if (read === undefined) return { value: null };
    const { rows } = await sql<{ v: V | null }>`select ${read} as v`.execute(trx);
    return { value: rows[0]?.v ?? null };
  }

  /** Writes `record`, if any, with `trx`. */
  async #journal(trx: Kysely<MinicloudTables>, record: JournalEntry | undefined): Promise<void> {
    if (record) await journal(trx, this.#clock, record.kind, record.ref);
  }

  /** PostgreSQL: a CTE that inserts `record` once per row of CTE `from` (none: nothing written). */
  #journalFrom(from: string, record: JournalEntry) {
    const r = journalRow(this.#clock, record.kind, record.ref);
    return sql`, j as (insert into "minicloud_journal" ("kind", "ref", "pid", "at")
      select ${r.kind}, ${r.ref}, ${r.pid}::integer, ${r.at}::bigint from ${sql.table(from)})`;
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
    const { rows } = await sql<{
      seq: number | string;
    }>`${this.#effectCtes(trx, claim, record && { record, from: 'k' }, statement)}
      select "seq" from k`.execute(trx);
    if (rows[0]) {
      if (!statement) await write(trx);
      return { kind: 'applied', seq: Number(rows[0].seq) };
    }
    const highest = await this.highestToken(claim.key, trx);
    if (claim.token < highest) return { kind: 'refused', highest };
    await this.#journal(trx, record);
    return { kind: 'already-applied' };
  }

  /**
   * PostgreSQL: the CTEs of an effect's statement: `k`, the upsert of the key's row (one row,
   * its new `seq`, when the effect is applied), then the effect's row, `journal` (inserted once
   * per row of its CTE `from`) and the effect's own write `statement`, all from `k`.
   */
  #effectCtes(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    journal: { record: JournalEntry; from: string } | undefined,
    statement: GatedWrite | undefined,
  ) {
    const upsert = trx
      .insertInto('minicloud_effect_keys')
      .values({ op_key: claim.key, token: claim.token, seq: 1, last_op: claim.op })
      .onConflict((oc) =>
        oc
          .column('op_key')
          .doUpdateSet((eb) => ({
            token: eb.ref('excluded.token'),
            seq: eb('minicloud_effect_keys.seq', '+', 1),
            last_op: eb.ref('excluded.last_op'),
          }))
          .where('minicloud_effect_keys.token', '<=', (eb) => eb.ref('excluded.token'))
          .where('minicloud_effect_keys.last_op', 'is distinct from', claim.op),
      )
      .returning('seq');
    const e = this.#effect(claim);
    return sql`with k as (${upsert}),
      e as (insert into "minicloud_effects"
          ("op_id", "op_key", "attempt", "host", "pid", "token", "at", "seq", "accepted", "reason")
        select ${e.op_id}, ${e.op_key}, ${e.attempt}::integer, ${e.host}, ${e.pid}::integer,
          ${e.token}::integer, ${e.at}::bigint, k."seq", 1, null from k)${
            journal ? this.#journalFrom(journal.from, journal.record) : sql``
          }${statement ? sql`, w as (${statement('k')})` : sql``}`;
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
   * effect is refused, and the statement fails with SQLSTATE `MC409` ({@link isEffectRefused}),
   * which rolls the transaction back: its caller then reads the key's highest token and records
   * the refusal with {@link refused}.
   */
  async applyWithCommit(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    statement: GatedWrite,
    record?: JournalEntry,
  ): Promise<void> {
    await sendWithCommit(
      trx,
      sql`${this.#effectCtes(trx, claim, undefined, statement)}
      select 1 as one`,
    );
    const held = sql`select 1 as one from "minicloud_effect_keys"
      where "op_key" = ${claim.key} and "last_op" = ${claim.op}
        and "token" <= ${claim.token}::integer`;
    const refusal = `minicloud.container_fenced: ${claim.op} on ${claim.key}, token ${claim.token}`;
    await sendWithCommit(
      trx,
      sql`with a as (${held})${record ? this.#journalFrom('a', record) : sql``}
        select case when exists (select 1 from a) then 1
          else minicloud_refuse(${refusal}) end as ok`,
    );
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
      host: hostLabel(),
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
