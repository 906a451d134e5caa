import { hostname } from 'node:os';
import { isProcessAlive } from '@rigging/core';
import { prepareQuery } from '../../sql-peer.js';
import { KEYS } from '../names.js';
import type { Db } from '../rows.js';
import type { HeldRow, KeyCount } from '../types.js';
import { keyUpsert, type QueueDialect } from './dialect.js';

/**
 * The statement that needs `RETURNING` (SQLite ≥ 3.35, PostgreSQL), built once per dialect
 * instance (`prepareQuery`): the key upsert that counts an op in. @internal
 */
export function returningStatements(): Pick<QueueDialect, 'upsertKey'> {
  const keyCountedIn = prepareQuery((db, p: { queue: string; key: string; at: number }) => {
    const upsert = keyUpsert(p.queue, p.key, p.at);
    return db
      .insertInto(KEYS)
      .values(upsert.values)
      .onConflict((oc) => oc.columns(['queue', 'op_key']).doUpdateSet(upsert.bump))
      .returning(['state', 'next_seq', 'pending']);
  });
  return {
    async upsertKey(trx, queue, key, at) {
      const { rows } = await keyCountedIn.execute(trx, { queue, key, at });
      return rows[0] as KeyCount;
    },
  };
}

/**
 * Owners on one machine: a claim records this host and pid; a claim whose pid on this host is no
 * longer alive is taken over at once (a SQLite file is shared by processes of one machine).
 */
const processOwners = {
  async presence() {
    return {
      tag: `pid:${hostname()}:${process.pid}`,
      lost: new AbortController().signal,
      close: async () => {},
    };
  },
  async gone(_db: Db, tags: readonly string[]) {
    const gone = new Set<string>();
    const here = hostname();
    for (const tag of tags) {
      const m = /^pid:(.*):(\d+)$/.exec(tag);
      if (m && m[1] === here && !isProcessAlive(Number(m[2]))) gone.add(tag);
    }
    return gone;
  },
};

/**
 * SQLite (WAL): one writer at a time, so a write transaction needs no row locks; other processes
 * on the machine are found by polling. `RETURNING` (SQLite ≥ 3.35) saves the read-backs.
 * @internal
 */
export function sqliteDialect(): QueueDialect {
  return {
    name: 'sqlite',
    defaultPollMs: 250,
    splitBatches: false,
    forUpdate: (query) => query,
    notify: async () => {},
    ...returningStatements(),
    async extendLeases(db, _queue, claims, until, held) {
      return (await db
        .updateTable(KEYS)
        .set({ lease_until: until })
        .where(held(claims))
        .returning(['running_op', 'token'])
        .execute()) as HeldRow[];
    },
    owners: processOwners,
  };
}
