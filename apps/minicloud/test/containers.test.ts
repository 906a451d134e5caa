// The container runtime's handlers called as the queue calls them, on a SQLite file: a worker
// that lost its claim on an op and took the op again holds two runs of its flow at once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HandlerContext } from '@rigging/async-queue';
import { sleep, systemClock, type Lease } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { Engine } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containerHandlers } from '../src/cloud/containers.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../src/migrations.js';

const dir = mkdtempSync(join(tmpdir(), 'minicloud-containers-'));
let database: Database<MinicloudTables>;

beforeAll(async () => {
  database = await openDatabase<MinicloudTables>(`sqlite:${join(dir, 'mc.db')}`);
  await database.migrate(NAMESPACE, migrations);
});
afterAll(async () => {
  await database?.close();
  rmSync(dir, { recursive: true, force: true });
});

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

describe('container runtime', () => {
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
});
