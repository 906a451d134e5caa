// The container runtime's handlers called as the queue calls them, on a SQLite file and on
// PostgreSQL (where an op's start goes with its first step's commit): a worker that lost its
// claim on an op and took the op again holds two runs of its flow at once; an op on a container
// that does not exist, or under a stale claim, is refused with nothing of it written.
import type { HandlerContext } from '@rigging/async-queue';
import { sleep, systemClock, type Lease } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { Engine } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { containerHandlers } from '../src/cloud/containers.js';
import type { MinicloudTables } from '../src/migrations.js';
import { freshMinicloudDatabase } from './fresh-database.js';

const backends = await sqlBackends('mc_containers', ['sqlite-file', 'postgres']);

/** What the queue hands a handler for a claim of op `id` on `key` with `token`. */
function claimOf(id: string, key: string, token: bigint, lost: AbortController): HandlerContext {
  const lease: Lease = {
    key,
    mode: 'exclusive',
    token,
    lost: lost.signal,
    release: () => Promise.resolve(),
    [Symbol.asyncDispose]: () => Promise.resolve(),
  };
  return {
    id,
    opId: id,
    key,
    type: 'create',
    attempt: Number(token),
    signal: lost.signal,
    lease,
    giveBack: (reason?: string) => {
      throw new Error(`given back: ${reason}`);
    },
  };
}

for (const backend of backends) {
  describe.skipIf(!backend.available)(`container runtime on ${backend.kind}`, () => {
    let database!: Database<MinicloudTables>;
    freshMinicloudDatabase(backend, (opened) => (database = opened));

    it('a worker that lost its claim and took the op again finishes it under the new claim', async () => {
      const engine = new Engine({ log: await sqlLog(database), clock: systemClock });
      const handlers = containerHandlers({ database, engine, clock: systemClock });
      const payload = { durationMs: 600 }; // each step waits 300 ms
      const first = new AbortController();
      const stale = handlers.create(payload, claimOf('op-1', 'ctr-1', 1n, first));
      stale.catch(() => {});
      await sleep(100); // the first claim's flow is in its first step
      // The claim is lost and the same worker takes the op again: the new run waits for the flow
      // until the stale one has stopped at its task boundary.
      first.abort(new Error('claim lost'));
      const second = handlers.create(payload, claimOf('op-1', 'ctr-1', 2n, new AbortController()));
      await expect(stale).rejects.toThrow();
      await expect(second).resolves.toEqual({ name: 'ctr-1', state: 'created' });
      const effects = await database.db
        .selectFrom('minicloud_effects')
        .select(['op_id', 'token'])
        .where('op_key', '=', 'ctr-1')
        .where('accepted', '=', 1)
        .execute();
      expect(effects.map((e) => [e.op_id, Number(e.token)])).toEqual([['op-1', 2]]);
    });

    it('refuses an op on a missing container and one under a stale claim, writing nothing of either', async () => {
      const engine = new Engine({ log: await sqlLog(database), clock: systemClock });
      const handlers = containerHandlers({ database, engine, clock: systemClock });
      const payload = { durationMs: 20 };
      const claim = (id: string, key: string, token: bigint) =>
        claimOf(id, key, token, new AbortController());
      const started = async (ref: string) =>
        (
          await database.db
            .selectFrom('minicloud_journal')
            .select('ref')
            .where('ref', '=', ref)
            .execute()
        ).length;
      await expect(handlers.start(payload, claim('op-m', 'ctr-missing', 1n))).rejects.toMatchObject(
        {
          code: 'minicloud.container_not_found',
          message: 'start ctr-missing: no such container',
        },
      );
      expect(await started('op-m')).toBe(0);
      const keyRows = await database.db
        .selectFrom('minicloud_effect_keys')
        .select('token')
        .where('op_key', '=', 'ctr-missing')
        .execute();
      expect(keyRows).toEqual([]);

      await expect(handlers.create(payload, claim('op-c', 'ctr-s', 5n))).resolves.toEqual({
        name: 'ctr-s',
        state: 'created',
      });
      await expect(handlers.start(payload, claim('op-s', 'ctr-s', 3n))).rejects.toMatchObject({
        code: 'minicloud.container_stale_claim',
        message: 'start ctr-s: claim token 3 is stale',
      });
      expect(await started('op-s')).toBe(0);
      await expect(handlers.start(payload, claim('op-t', 'ctr-s', 6n))).resolves.toEqual({
        name: 'ctr-s',
        state: 'running',
      });
    });
  });
}
