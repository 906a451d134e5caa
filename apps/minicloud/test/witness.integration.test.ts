// The container runtime's witness on every backend: a claim's fence only moves its key's token
// upwards, an effect under a lower token is refused and writes nothing, an op's effect is applied
// once, and two claims applying on one key at once are serialized by the key's row.
import { systemClock } from '@rigging/core';
import { sql, withCommit, type Database, type Kysely } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { refusalOf, Witness, type EffectClaim } from '../src/cloud/witness.js';
import type { MinicloudTables } from '../src/migrations.js';
import { freshMinicloudDatabase } from './fresh-database.js';

const backends = await sqlBackends('mc_witness', ['sqlite-file', 'postgres', 'mysql']);

/** The state of the container `p.name`, as a scalar read. */
const state = (db: Kysely<MinicloudTables>, p: { name: string }) =>
  db.selectFrom('minicloud_containers').select('state').where('name', '=', p.name);

/** A gated write (PostgreSQL) that inserts the container `p.name`. */
const insertNamed = (from: string, p: { name: string }) => sql`insert into "minicloud_containers"
  ("name", "image", "state", "updated_at")
  select ${p.name}, 'img', 'created', ${1}::bigint from ${sql.table(from)}`;

const claim = (op: string, key: string, token: number): EffectClaim => ({
  op,
  key,
  attempt: 1,
  token,
});

for (const backend of backends) {
  describe.skipIf(!backend.available)(`the witness on ${backend.kind}`, () => {
    let database!: Database<MinicloudTables>;
    let witness!: Witness;
    freshMinicloudDatabase(backend, (opened) => {
      database = opened;
      witness = new Witness(database, systemClock);
    });

    const fence = (c: EffectClaim) => database.transaction((trx) => witness.fence(trx, c));
    const token = async (key: string) =>
      Number(
        (
          await database.db
            .selectFrom('minicloud_effect_keys')
            .select('token')
            .where('op_key', '=', key)
            .executeTakeFirstOrThrow()
        ).token,
      );
    const effects = (key: string) =>
      database.db
        .selectFrom('minicloud_effects')
        .select(['op_id', 'seq', 'token'])
        .where('op_key', '=', key)
        .where('accepted', '=', 1)
        .orderBy('seq')
        .execute();
    const apply = (c: EffectClaim, write: (trx: Kysely<MinicloudTables>) => Promise<void>) =>
      database.transaction((trx) => witness.apply(trx, c, write));
    const noWrite = async () => {};
    /**
     * Fences `c`'s key, then applies `c` with a write that takes 300 ms: resolves once that write
     * has begun (the key's row is then locked until it ends), with the apply's outcome to come
     * (in an object: an async function would wait for a promise it returns).
     */
    const applyHolding = async (c: EffectClaim) => {
      expect(await fence(c)).toBe(true);
      let entered!: () => void;
      const inFirst = new Promise<void>((resolve) => (entered = resolve));
      const outcome = apply(c, async () => {
        entered();
        await new Promise((resolve) => setTimeout(resolve, 300));
      });
      await inFirst;
      return { outcome };
    };

    it('fences a new key, then moves its token only upwards', async () => {
      expect(await fence(claim('o1', 'f', 3))).toBe(true);
      expect(await token('f')).toBe(3);
      expect(await fence(claim('o2', 'f', 3))).toBe(true); // the same claim again
      expect(await fence(claim('o3', 'f', 2))).toBe(false);
      expect(await token('f')).toBe(3);
      expect(await fence(claim('o4', 'f', 7))).toBe(true);
      expect(await token('f')).toBe(7);
      expect(await witness.lastSeq('f')).toBe(0); // fencing takes no sequence number
    });

    /** The kinds of the journal rows about `ref`, in order. */
    const journal = async (ref: string) =>
      (
        await database.db
          .selectFrom('minicloud_journal')
          .select('kind')
          .where('ref', '=', ref)
          .orderBy('kind')
          .execute()
      ).map((r) => r.kind);
    /** A transaction's last statement, sent with its commit: the journal row `last` of `op`. */
    const last = (trx: Kysely<MinicloudTables>, op: string) =>
      withCommit(
        trx.insertInto('minicloud_journal').values({ kind: 'last', ref: op, pid: 1, at: 1 }),
        'committed',
      );

    /** Writes the container `name` in `state`. */
    const container = (name: string, state: string) =>
      database.db
        .insertInto('minicloud_containers')
        .values({ name, image: 'img', state, updated_at: 1 })
        .execute();

    it('reads a scalar with a fence that holds, and neither reads nor writes under a stale claim', async () => {
      await container('fr-c', 'running');
      const fenceAndRead = (c: EffectClaim, name: string) =>
        database.transaction((trx) =>
          witness.fenceAndRead(
            trx,
            c,
            { kind: 'op-start', ref: c.op },
            { build: state, params: { name } },
          ),
        );
      expect(await fenceAndRead(claim('fr1', 'fr', 4), 'fr-c')).toEqual({ value: 'running' });
      expect(await fenceAndRead(claim('fr2', 'fr', 5), 'fr-missing')).toEqual({ value: null });
      expect(await fenceAndRead(claim('fr0', 'fr', 3), 'fr-c')).toBeUndefined();
      expect(await token('fr')).toBe(5);
      const started = await database.db
        .selectFrom('minicloud_journal')
        .select('ref')
        .where('ref', 'in', ['fr0', 'fr1', 'fr2'])
        .orderBy('ref')
        .execute();
      expect(started.map((r) => r.ref)).toEqual(['fr1', 'fr2']);
      // Without a read: the fence alone.
      expect(
        await database.transaction((trx) => witness.fenceAndRead(trx, claim('fr3', 'fr', 6))),
      ).toEqual({ value: null });
    });

    it('applies an effect once per op, in sequence, and refuses a lower token with nothing written', async () => {
      const writes: string[] = [];
      const write = (what: string) => async () => void writes.push(what);
      expect(await apply(claim('a', 'k', 1), write('a'))).toEqual({ kind: 'applied', seq: 1 });
      expect(await apply(claim('a', 'k', 2), write('a again'))).toEqual({
        kind: 'already-applied',
      });
      expect(await apply(claim('b', 'k', 2), write('b'))).toEqual({ kind: 'applied', seq: 2 });
      expect(await apply(claim('c', 'k', 1), write('c'))).toEqual({ kind: 'refused', highest: 2 });
      expect(writes).toEqual(['a', 'b']);
      expect((await effects('k')).map((e) => [e.op_id, Number(e.seq), Number(e.token)])).toEqual([
        ['a', 1, 1],
        ['b', 2, 2],
      ]);
      // A fence by a later claim refuses the effects of the earlier ones.
      expect(await fence(claim('d', 'k', 5))).toBe(true);
      expect(await apply(claim('e', 'k', 4), noWrite)).toEqual({ kind: 'refused', highest: 5 });
      expect(await witness.lastSeq('k')).toBe(2);
    });

    it('writes the journal row it is given only with a fence or an effect that holds', async () => {
      const start = (c: EffectClaim) =>
        database.transaction((trx) => witness.fence(trx, c, { kind: 'op-start', ref: c.op }));
      const applied = (c: EffectClaim) =>
        database.transaction((trx) =>
          witness.apply(trx, c, noWrite, { record: { kind: 'op', ref: c.op } }),
        );
      expect(await start(claim('j1', 'jk', 4))).toBe(true);
      expect(await start(claim('j0', 'jk', 3))).toBe(false);
      expect(await applied(claim('j1', 'jk', 4))).toEqual({ kind: 'applied', seq: 1 });
      expect(await applied(claim('j1', 'jk', 5))).toEqual({ kind: 'already-applied' });
      // Finding it applied writes only the journal row: the key's token stays 4.
      expect(await applied(claim('j0', 'jk', 3))).toEqual({ kind: 'refused', highest: 4 });
      expect(await journal('j1')).toEqual(['op', 'op', 'op-start']);
      expect(await journal('j0')).toEqual([]);
      expect(await witness.lastSeq('jk')).toBe(1);
    });

    it('runs the write as one gated statement on PostgreSQL, only when the effect applies', async () => {
      const ran: string[] = [];
      const put = (c: EffectClaim, name: string) =>
        database.transaction((trx) =>
          witness.apply(trx, c, async () => void ran.push(name), {
            statement: { build: insertNamed, params: { name } },
          }),
        );
      const names = async () =>
        (
          await database.db
            .selectFrom('minicloud_containers')
            .select('name')
            .where('name', 'like', 'gw-%')
            .orderBy('name')
            .execute()
        ).map((r) => r.name);
      expect(await put(claim('g1', 'gk', 2), 'gw-1')).toEqual({ kind: 'applied', seq: 1 });
      expect(await put(claim('g1', 'gk', 3), 'gw-1 again')).toEqual({ kind: 'already-applied' });
      expect(await put(claim('g0', 'gk', 1), 'gw-0')).toEqual({ kind: 'refused', highest: 2 });
      // PostgreSQL writes with the statement (and never calls back); the others call back.
      if (backend.kind === 'postgres')
        expect({ ran, rows: await names() }).toEqual({ ran: [], rows: ['gw-1'] });
      else expect({ ran, rows: await names() }).toEqual({ ran: ['gw-1'], rows: [] });
    });

    it('serializes two claims applying one op at once: one applies, the other finds it applied', async () => {
      // The first holds the key's row (which exists already) until its write ends; the second
      // waits for it.
      const { outcome: first } = await applyHolding(claim('x', 'race', 1));
      const second = apply(claim('x', 'race', 2), noWrite);
      const outcomes = await Promise.all([first, second]);
      expect(outcomes).toEqual([{ kind: 'applied', seq: 1 }, { kind: 'already-applied' }]);
      expect(await effects('race')).toHaveLength(1);
    });

    it.runIf(backend.kind === 'postgres')(
      'sent with the commit: applies, finds it applied, or fails the transaction when refused',
      async () => {
        // The effect's statement goes with the transaction's last statement and its COMMIT.
        const sent = (c: EffectClaim, name: string) =>
          database.transaction(async (trx) => {
            await witness.applyWithCommit(
              trx,
              c,
              { build: insertNamed, params: { name } },
              { kind: 'op', ref: c.op },
            );
            return last(trx, c.op);
          });
        const rows = async (ref: string) => ({
          journal: await journal(ref),
          containers: (
            await database.db
              .selectFrom('minicloud_containers')
              .select('name')
              .where('name', 'like', `${ref}%`)
              .execute()
          ).map((r) => r.name),
        });
        expect(await sent(claim('h1', 'hk', 2), 'h1-c')).toBe('committed');
        expect(await rows('h1')).toEqual({ journal: ['last', 'op'], containers: ['h1-c'] });
        // A taker of the same op finds it applied: the journal row again, nothing else (the
        // key's token stays 2).
        expect(await sent(claim('h1', 'hk', 3), 'h1-again')).toBe('committed');
        expect(await rows('h1')).toEqual({
          journal: ['last', 'last', 'op', 'op'],
          containers: ['h1-c'],
        });
        // A lower token: the transaction fails with the refusal, and nothing of it is left.
        const error = await sent(claim('h0', 'hk', 1), 'h0-c').catch((e: unknown) => e);
        expect(refusalOf(error)).toEqual({
          code: 'minicloud.container_fenced',
          message: 'h0 on hk, token 1',
        });
        expect(await rows('h0')).toEqual({ journal: [], containers: [] });
        expect(await witness.highestToken('hk')).toBe(2);
        expect((await effects('hk')).map((e) => [e.op_id, Number(e.seq), Number(e.token)])).toEqual(
          [['h1', 1, 2]],
        );
        // Any other failure is not a refusal.
        expect(refusalOf(new Error('boom'))).toBeUndefined();
      },
    );

    it.runIf(backend.kind === 'postgres')(
      'a fence sent with the commit: fences and journals, or fails the transaction when stale or when what it requires is missing',
      async () => {
        await container('fc-c', 'created');
        const started = (c: EffectClaim, name?: string) =>
          database
            .transaction(async (trx) => {
              await witness.fenceWithCommit(
                trx,
                c,
                { kind: 'op-start', ref: c.op },
                {
                  stale: `minicloud.container_stale_claim: ${c.op} is stale`,
                  required: name
                    ? {
                        read: { build: state, params: { name } },
                        missing: `minicloud.container_not_found: no ${name}`,
                      }
                    : undefined,
                },
              );
              return last(trx, c.op);
            })
            .catch((error: unknown) => refusalOf(error) ?? error);
        expect(await started(claim('fc1', 'fck', 3), 'fc-c')).toBe('committed');
        expect(await journal('fc1')).toEqual(['last', 'op-start']);
        expect(await token('fck')).toBe(3);
        expect(await started(claim('fc2', 'fck', 4))).toBe('committed');
        expect(await token('fck')).toBe(4);
        // A lower token: refused, and nothing of the transaction is left.
        expect(await started(claim('fc0', 'fck', 2), 'fc-c')).toEqual({
          code: 'minicloud.container_stale_claim',
          message: 'fc0 is stale',
        });
        expect(await journal('fc0')).toEqual([]);
        // What it requires is missing: refused, and the fence did not move the token.
        expect(await started(claim('fc5', 'fck', 5), 'fc-missing')).toEqual({
          code: 'minicloud.container_not_found',
          message: 'no fc-missing',
        });
        expect(await journal('fc5')).toEqual([]);
        expect(await token('fck')).toBe(4);
      },
    );

    it.runIf(backend.kind === 'postgres')(
      'sent with the commit while another claim applies the same op: finds it applied',
      async () => {
        const { outcome: first } = await applyHolding(claim('y', 'race2', 1));
        // Its statements start while the first holds the key's row, and wait for it.
        const second = database.transaction(async (trx) => {
          await witness.applyWithCommit(
            trx,
            claim('y', 'race2', 2),
            { build: (from) => sql`select 1 from ${sql.table(from)}`, params: {} },
            { kind: 'op', ref: 'y-second' },
          );
          return withCommit(sql`select ${1}::int as one`, 'committed');
        });
        expect(await Promise.all([first, second])).toEqual([
          { kind: 'applied', seq: 1 },
          'committed',
        ]);
        expect(await effects('race2')).toHaveLength(1);
        const journal = await database.db
          .selectFrom('minicloud_journal')
          .select('kind')
          .where('ref', '=', 'y-second')
          .execute();
        expect(journal).toEqual([{ kind: 'op' }]);
      },
    );
  });
}
