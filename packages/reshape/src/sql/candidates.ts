/** The candidate snapshot of a SQL store: every table the search reads, in one transaction. */
import { emptySnapshot, type CandidateSnapshot } from '../candidates-types.js';
import { T } from './schema.js';
import { inventoryFromRow, toProvider, type Db, type ProviderRecord } from './rows.js';
import type { SqlQueries } from './queries.js';

/** Reads providers, inventories, usages, traits and aggregates in one repeatable-read transaction. */
export function readCandidateSnapshot(q: SqlQueries): Promise<CandidateSnapshot> {
  return q.snapshotTx(async (trx: Db) => {
    const providers = (
      (await trx.selectFrom(T.providers).selectAll().orderBy('uuid').execute()) as ProviderRecord[]
    ).map(toProvider);
    const snap = emptySnapshot(providers);
    for (const r of await q.run(trx, `select * from ${T.inventories}`, [])) {
      const u = String(r.provider_uuid);
      if (!snap.inventories.has(u)) snap.inventories.set(u, {});
      snap.inventories.get(u)![String(r.resource_class)] = inventoryFromRow(r);
    }
    for (const r of await q.run(
      trx,
      `select provider_uuid, resource_class, sum(used) as used from ${T.allocations} group by provider_uuid, resource_class`,
      [],
    )) {
      const u = String(r.provider_uuid);
      if (!snap.usages.has(u)) snap.usages.set(u, {});
      snap.usages.get(u)![String(r.resource_class)] = Number(r.used);
    }
    const lists = async (table: string, column: string, into: Map<string, string[]>) => {
      for (const r of await q.run(
        trx,
        `select provider_uuid, ${column} as v from ${table} order by provider_uuid, ${column}`,
        [],
      )) {
        const u = String(r.provider_uuid);
        if (!into.has(u)) into.set(u, []);
        into.get(u)!.push(String(r.v));
      }
    };
    await lists(T.traits, 'trait', snap.traits);
    await lists(T.aggregates, 'aggregate_uuid', snap.aggregates);
    return snap;
  });
}
