import { hostname } from 'node:os';
import type { Clock } from '@rigging/core';
import { sql, type Database, type Kysely } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';

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

/** What {@link Witness.apply} did. */
export type EffectOutcome =
  | { kind: 'applied'; seq: number }
  | { kind: 'already-applied' }
  | { kind: 'refused'; highest: number };

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
 * sequence number, records the effect in `minicloud_effects` and applies it. A verdict reads these tables directly: an op with two
 * accepted effects was applied twice, per-key sequence numbers give the order the effects really
 * happened in, and refused rows are stale writes that fencing stopped.
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
   * higher token was already seen (this claim is stale; nothing changed). One upsert that moves
   * the token only upwards (MySQL: the locked row is read, then updated).
   */
  async fence(trx: Kysely<MinicloudTables>, claim: EffectClaim): Promise<boolean> {
    if (this.#database.dialect === 'mysql') {
      const row = await this.#lockedKey(trx, claim.key);
      if (claim.token < Number(row.token)) return false;
      await trx
        .updateTable('minicloud_effect_keys')
        .set({ token: claim.token })
        .where('op_key', '=', claim.key)
        .execute();
      return true;
    }
    const moved = await trx
      .insertInto('minicloud_effect_keys')
      .values({ op_key: claim.key, token: claim.token, seq: 0 })
      .onConflict((oc) =>
        oc
          .column('op_key')
          .doUpdateSet((eb) => ({ token: eb.ref('excluded.token') }))
          .where('minicloud_effect_keys.token', '<=', (eb) => eb.ref('excluded.token')),
      )
      .returning('token')
      .executeTakeFirst();
    return moved !== undefined;
  }

  /**
   * Applies `write` as the effect of `claim`, witnessed (see the class), with `trx` (the caller's
   * transaction, which commits or rolls back the effect with whatever else it holds). `also`
   * runs with `trx` too when the effect is applied or found already applied (not when it is
   * refused): the caller's own record of it. `idempotent: false` skips the check that the op's
   * effect is not applied yet (only sabotage runs do that). A refusal writes nothing: the caller
   * records it with {@link refused} once its transaction has rolled back.
   */
  async apply(
    trx: Kysely<MinicloudTables>,
    claim: EffectClaim,
    write: (trx: Kysely<MinicloudTables>) => Promise<void>,
    options: {
      idempotent?: boolean;
      also?: (trx: Kysely<MinicloudTables>) => Promise<void>;
    } = {},
  ): Promise<EffectOutcome> {
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
        await options.also?.(trx);
        return { kind: 'already-applied' };
      }
    }
    const seq = Number(row.seq) + 1;
    const key = trx
      .updateTable('minicloud_effect_keys')
      .set({ token: claim.token, seq })
      .where('op_key', '=', claim.key);
    const effect = trx
      .insertInto('minicloud_effects')
      .values({ ...this.#effect(claim), seq, accepted: 1, reason: null });
    // PostgreSQL: the key's update and the effect's row in one statement (one round trip); the
    // key's row is already locked by this transaction.
    if (this.#database.dialect === 'postgres') await sql`with k as (${key}) ${effect}`.execute(trx);
    else {
      await key.execute();
      await effect.execute();
    }
    await write(trx);
    await options.also?.(trx);
    return { kind: 'applied', seq };
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
