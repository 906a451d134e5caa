/** `listProviders` over SQL: name, uuid, tree, aggregates and traits in the query, then capacity. */
import { fitsInventory, normalizeUuid, type ResourceProvider } from '../model.js';
import { checkFilter, parentsFirst, type ProviderFilter } from '../store.js';
import { checkFilterNames } from '../shared.js';
import type { SqlQueries } from './queries.js';
import { chunks, inventoryFromRow, toProvider, type ProviderRecord } from './rows.js';
import { T } from './schema.js';

/** The providers matching `filter`, parents before children. @internal */
export async function selectProviders(
  q: SqlQueries,
  filter: ProviderFilter,
  standardTraits: ReadonlySet<string> | undefined,
): Promise<ResourceProvider[]> {
  const f = checkFilter(filter);
  const customTraits =
    f.requiredTraits.length || f.forbiddenTraits.length
      ? await q.customTraits(q.db)
      : new Set<string>();
  const customClasses = f.resources.length ? await q.customClasses(q.db) : new Set<string>();
  checkFilterNames(
    f,
    standardTraits,
    (t) => customTraits.has(t),
    (rc) => customClasses.has(rc),
  );
  if ([...f.memberOf, ...f.requiredTraits].some((anyOf) => anyOf.length === 0)) return [];
  let query = q.db.selectFrom(T.providers).selectAll();
  if (filter.inTree !== undefined) {
    const root = (await q.readProvider(filter.inTree)).rootProviderUuid;
    query = query.where('root_uuid', '=', root);
  }
  if (filter.name !== undefined) query = query.where('name', '=', filter.name);
  if (filter.uuid !== undefined)
    query = query.where('uuid', '=', normalizeUuid(filter.uuid, 'provider uuid'));
  const inAggregates = (aggregates: string[]) =>
    q.db.selectFrom(T.aggregates).select('provider_uuid').where('aggregate_uuid', 'in', aggregates);
  const withTraits = (traits: string[]) =>
    q.db.selectFrom(T.traits).select('provider_uuid').where('trait', 'in', traits);
  for (const anyOf of f.memberOf) query = query.where('uuid', 'in', inAggregates(anyOf));
  if (f.notMemberOf.length) query = query.where('uuid', 'not in', inAggregates(f.notMemberOf));
  for (const anyOf of f.requiredTraits) query = query.where('uuid', 'in', withTraits(anyOf));
  if (f.forbiddenTraits.length)
    query = query.where('uuid', 'not in', withTraits(f.forbiddenTraits));
  for (const [rc] of f.resources)
    query = query.where(
      'uuid',
      'in',
      q.db.selectFrom(T.inventories).select('provider_uuid').where('resource_class', '=', rc),
    );
  let list = ((await query.execute()) as ProviderRecord[]).map(toProvider);
  if (f.resources.length && list.length) list = await withRoom(q, list, f.resources);
  return parentsFirst(list);
}

/**
 * The providers of `list` with room for every `[class, amount]` of `resources`; reads the usage
 * and inventories of those providers only, in chunks.
 */
async function withRoom(
  q: SqlQueries,
  list: ResourceProvider[],
  resources: [string, number][],
): Promise<ResourceProvider[]> {
  const classes = resources.map(([rc]) => rc);
  const key = (uuid: string, rc: string) => `${uuid} ${rc}`;
  const used = new Map<string, number>();
  const fitting = new Map<string, number>();
  for (const part of chunks(list.map((p) => p.uuid))) {
    for (const r of (await q.db
      .selectFrom(T.allocations)
      .select(['provider_uuid', 'resource_class'])
      .select((eb) => eb.fn.sum('used').as('used'))
      .where('provider_uuid', 'in', part)
      .where('resource_class', 'in', classes)
      .groupBy(['provider_uuid', 'resource_class'])
      .execute()) as { provider_uuid: string; resource_class: string; used: unknown }[])
      used.set(key(r.provider_uuid, r.resource_class), Number(r.used));
    for (const r of (await q.db
      .selectFrom(T.inventories)
      .selectAll()
      .where('provider_uuid', 'in', part)
      .where('resource_class', 'in', classes)
      .execute()) as Record<string, unknown>[]) {
      const uuid = String(r.provider_uuid);
      const rc = String(r.resource_class);
      const amount = resources.find(([c]) => c === rc)![1];
      if (fitsInventory(inventoryFromRow(r), used.get(key(uuid, rc)) ?? 0, amount))
        fitting.set(uuid, (fitting.get(uuid) ?? 0) + 1);
    }
  }
  return list.filter((p) => fitting.get(p.uuid) === resources.length);
}
