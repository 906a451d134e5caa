/** The {@link ReshapeStore} over SQL: every method is one transaction of {@link SqlQueries}. */
import { randomUUID } from 'node:crypto';
import type { Database } from '@rigging/sql';
import {
  checkName,
  checkResourceClassName,
  normalizeUuid,
  type AllocationsInput,
  type ConsumerAllocations,
  type Inventory,
  type InventoryInput,
  type ProviderInventories,
  type ReshapeRequest,
  type ReshapeResult,
  type ResourceProvider,
  type Resources,
  type TotalUsages,
} from '../model.js';
import {
  byAssociation,
  checkCustomName,
  checkDeletableTrait,
  checkTraits,
  consumerNotFound,
  movedUnderDescendant,
  providerHasChildren,
  providerInUse,
  resourceClassExists,
  resourceClassInUse,
  resourceClassNotFound,
  conflictGeneration,
  notFound,
  standardTraitsOption,
  traitInUse,
} from '../shared.js';
import {
  buildReport,
  checkAggregates,
  totalUsages,
  type CreateProviderInput,
  type ProviderFilter,
  type ReshapeReport,
  type ReshapeStore,
  type StoreOptions,
  type TraitFilter,
  type UpdateProviderInput,
} from '../store.js';
import { plan, prepare } from '../engine.js';
import { migrations, T } from './schema.js';
import { selectProviders } from './list-providers.js';
import { SqlQueries } from './queries.js';
import { readCandidateSnapshot } from './candidates.js';
import type { CandidateSnapshot } from '../candidates-types.js';
import { chunks, marks, inventoryFromRow } from './rows.js';
import { STANDARD_RESOURCE_CLASSES } from '../vocabulary.js';

/**
 * Options of {@link sqlStore}. `standardTraits` is not stored: give every store over one database
 * the same list.
 */
export interface SqlStoreOptions extends StoreOptions {
  /** Apply the schema migrations first. @default true */
  migrate?: boolean;
}

/** A store over a `@rigging/sql` database (tables prefixed `rigging_reshape_`). */
export async function sqlStore(
  database: Database,
  options: SqlStoreOptions = {},
): Promise<ReshapeStore> {
  const standardTraits = standardTraitsOption('sqlStore', options.standardTraits);
  if (options.migrate ?? true) await database.migrate('reshape', migrations);
  return new SqlStore(new SqlQueries(database), standardTraits);
}

/** The methods of {@link sqlStore}, each one transaction or one read. */
class SqlStore implements ReshapeStore {
  constructor(
    private readonly q: SqlQueries,
    private readonly standardTraits: ReadonlySet<string> | undefined,
  ) {}

  async createProvider(input: CreateProviderInput): Promise<ResourceProvider> {
    const name = checkName(input.name);
    const uuid = normalizeUuid(input.uuid ?? randomUUID(), 'provider uuid');
    return this.q.tx(async (trx) => {
      let root = uuid;
      let parent: string | null = null;
      if (input.parentProviderUuid != null) {
        const p = await this.q.lockedProvider(trx, input.parentProviderUuid);
        root = p.rootProviderUuid;
        parent = p.uuid;
      }
      const existing = (await trx
        .selectFrom(T.providers)
        .select('uuid')
        .where((eb) => eb.or([eb('uuid', '=', uuid), eb('name', '=', name)]))
        .executeTakeFirst()) as { uuid: string } | undefined;
      if (existing) this.q.duplicate({ code: '23505' }, name, uuid);
      await trx
        .insertInto(T.providers)
        .values({ uuid, name, parent_uuid: parent, root_uuid: root, generation: 0 })
        .execute()
        .catch((e: unknown) => this.q.duplicate(e, name, uuid));
      return { uuid, name, parentProviderUuid: parent, rootProviderUuid: root, generation: 0 };
    });
  }

  getProvider(uuid: string): Promise<ResourceProvider | undefined> {
    return this.q.findProvider(uuid);
  }

  listProviders(filter: ProviderFilter = {}): Promise<ResourceProvider[]> {
    return selectProviders(this.q, filter, this.standardTraits);
  }

  async updateProvider(
    uuid: string,
    input: UpdateProviderInput & { generation?: number },
  ): Promise<ResourceProvider> {
    return this.q.tx(async (trx) => {
      const rp = await this.q.lockedProvider(trx, uuid);
      if (input.generation !== undefined && input.generation !== rp.generation)
        throw conflictGeneration(rp, input.generation);
      const name = input.name === undefined ? rp.name : checkName(input.name);
      let parent = rp.parentProviderUuid;
      let root = rp.rootProviderUuid;
      if (input.parentProviderUuid !== undefined && input.parentProviderUuid !== parent) {
        if (input.parentProviderUuid === null) {
          parent = null;
          root = rp.uuid;
        } else {
          const np = await this.q.lockedProvider(trx, input.parentProviderUuid);
          let cursor: string | null = np.uuid;
          while (cursor) {
            if (cursor === rp.uuid) throw movedUnderDescendant(rp.uuid, np.uuid);
            const up = (await trx
              .selectFrom(T.providers)
              .select('parent_uuid')
              .where('uuid', '=', cursor)
              .executeTakeFirst()) as { parent_uuid: string | null } | undefined;
            cursor = up?.parent_uuid ?? null;
          }
          parent = np.uuid;
          root = np.rootProviderUuid;
        }
      }
      await trx
        .updateTable(T.providers)
        .set({ name, parent_uuid: parent, root_uuid: root })
        .where('uuid', '=', rp.uuid)
        .execute()
        .catch((e: unknown) => this.q.duplicate(e, name, rp.uuid));
      if (root !== rp.rootProviderUuid) {
        const tree = (await trx
          .selectFrom(T.providers)
          .select(['uuid', 'parent_uuid'])
          .where('root_uuid', '=', rp.rootProviderUuid)
          .execute()) as { uuid: string; parent_uuid: string | null }[];
        const subtree: string[] = [];
        const stack = [rp.uuid];
        while (stack.length) {
          const u = stack.pop()!;
          for (const c of tree) {
            if (c.parent_uuid !== u) continue;
            subtree.push(c.uuid);
            stack.push(c.uuid);
          }
        }
        for (const part of chunks(subtree))
          await trx
            .updateTable(T.providers)
            .set({ root_uuid: root })
            .where('uuid', 'in', part)
            .execute();
      }
      return { ...rp, name, parentProviderUuid: parent, rootProviderUuid: root };
    });
  }

  async deleteProvider(uuid: string): Promise<void> {
    await this.q.tx(async (trx) => {
      const rp = await this.q.lockedProvider(trx, uuid);
      const child = (await trx
        .selectFrom(T.providers)
        .select('uuid')
        .where('parent_uuid', '=', rp.uuid)
        .executeTakeFirst()) as { uuid: string } | undefined;
      if (child) throw providerHasChildren(rp.uuid, child.uuid);
      const used = await trx
        .selectFrom(T.allocations)
        .select('consumer_uuid')
        .where('provider_uuid', '=', rp.uuid)
        .executeTakeFirst();
      if (used) throw providerInUse(rp.uuid);
      await trx.deleteFrom(T.inventories).where('provider_uuid', '=', rp.uuid).execute();
      await trx.deleteFrom(T.traits).where('provider_uuid', '=', rp.uuid).execute();
      await trx.deleteFrom(T.aggregates).where('provider_uuid', '=', rp.uuid).execute();
      await trx.deleteFrom(T.providers).where('uuid', '=', rp.uuid).execute();
    });
  }

  async getInventories(uuid: string): Promise<ProviderInventories> {
    const id = normalizeUuid(uuid, 'provider uuid');
    // One statement, so the generation and the rows come from the same snapshot.
    const rows = await this.q.run(
      this.q.db,
      `select p.generation as provider_generation, i.* from ${T.providers} p left join ${T.inventories} i on i.provider_uuid = p.uuid where p.uuid = ?`,
      [id],
    );
    if (rows.length === 0) throw notFound(id);
    const inventories: Record<string, Inventory> = {};
    for (const r of rows)
      if (r.resource_class != null) inventories[String(r.resource_class)] = inventoryFromRow(r);
    return { generation: Number(rows[0]!.provider_generation), inventories };
  }

  async setInventories(
    uuid: string,
    input: { generation: number; inventories: Record<string, InventoryInput> },
  ): Promise<ProviderInventories> {
    const id = normalizeUuid(uuid, 'provider uuid');
    const r = await this.q.write(
      { inventories: { [id]: input } },
      { allowOvercommittedInventories: true },
    );
    const inv = await this.getInventories(id);
    return { generation: r.providerGenerations[id]!, inventories: inv.inventories };
  }

  async getTraits(uuid: string): Promise<{ generation: number; traits: string[] }> {
    const rp = await this.q.readProvider(uuid);
    const rows = (await this.q.db
      .selectFrom(T.traits)
      .select('trait')
      .where('provider_uuid', '=', rp.uuid)
      .execute()) as {
      trait: string;
    }[];
    return { generation: rp.generation, traits: rows.map((r) => r.trait).sort() };
  }

  async setTraits(
    uuid: string,
    input: { generation: number; traits: string[] },
  ): Promise<{ generation: number; traits: string[] }> {
    return this.q.tx(async (trx) => {
      const rp = await this.q.lockedProvider(trx, uuid);
      const custom = await this.q.lockCustomTraits(trx, input.traits);
      if (input.generation !== rp.generation) throw conflictGeneration(rp, input.generation);
      checkTraits(input.traits, this.standardTraits, (t) => custom.has(t));
      const traits = [...new Set(input.traits)].sort();
      await trx.deleteFrom(T.traits).where('provider_uuid', '=', rp.uuid).execute();
      if (traits.length)
        await trx
          .insertInto(T.traits)
          .values(traits.map((trait) => ({ provider_uuid: rp.uuid, trait })))
          .execute();
      await trx
        .updateTable(T.providers)
        .set({ generation: rp.generation + 1 })
        .where('uuid', '=', rp.uuid)
        .execute();
      return { generation: rp.generation + 1, traits };
    });
  }

  async listTraits(filter: TraitFilter = {}): Promise<string[]> {
    const names = await this.q.customTraits(this.q.db);
    const used = new Set(
      (
        (await this.q.db.selectFrom(T.traits).select('trait').distinct().execute()) as {
          trait: string;
        }[]
      ).map((r) => r.trait),
    );
    for (const t of this.standardTraits ?? used) names.add(t);
    return byAssociation(names, used, filter.associated).sort();
  }

  async deleteTrait(name: string): Promise<void> {
    await this.q.tx(async (trx) => {
      // Locked first: a concurrent setTraits naming it waits for the delete (and then finds no
      // such trait), or the delete waits for it (and then finds the trait in use).
      const custom = await this.q.lockCustomTraits(trx, [name]);
      checkDeletableTrait(name, this.standardTraits, () => custom.has(name));
      const used = await trx
        .selectFrom(T.traits)
        .select('provider_uuid')
        .where('trait', '=', name)
        .executeTakeFirst();
      if (used) throw traitInUse(name);
      await trx.deleteFrom(T.customTraits).where('name', '=', name).execute();
    });
  }

  async createTrait(name: string): Promise<boolean> {
    checkCustomName(name, 'trait');
    return this.q.insertName(T.customTraits, name);
  }

  async listResourceClasses(): Promise<string[]> {
    return [...STANDARD_RESOURCE_CLASSES, ...[...(await this.q.customClasses(this.q.db))].sort()];
  }

  async createResourceClass(name: string): Promise<boolean> {
    checkCustomName(name, 'resource class');
    return this.q.insertName(T.classes, name);
  }

  async deleteResourceClass(name: string): Promise<void> {
    checkResourceClassName(name);
    await this.q.tx(async (trx) => {
      const exists = await trx
        .selectFrom(T.classes)
        .select('name')
        .where('name', '=', name)
        .executeTakeFirst();
      if (!exists) throw resourceClassNotFound(name);
      const inv = (await trx
        .selectFrom(T.inventories)
        .select('provider_uuid')
        .where('resource_class', '=', name)
        .executeTakeFirst()) as { provider_uuid: string } | undefined;
      if (inv) throw resourceClassInUse(name, inv.provider_uuid);
      await trx.deleteFrom(T.classes).where('name', '=', name).execute();
    });
  }

  async renameResourceClass(from: string, to: string): Promise<void> {
    checkResourceClassName(from);
    checkCustomName(to, 'resource class');
    await this.q.tx(async (trx) => {
      const named = await trx
        .selectFrom(T.classes)
        .select('name')
        .where('name', 'in', [from, to])
        .execute();
      if (!named.some((r) => r.name === from)) throw resourceClassNotFound(from);
      if (named.some((r) => r.name === to)) throw resourceClassExists(to);
      await trx.insertInto(T.classes).values({ name: to }).execute();
      for (const table of [T.inventories, T.allocations]) {
        await trx
          .updateTable(table)
          .set({ resource_class: to })
          .where('resource_class', '=', from)
          .execute();
      }
      await trx.deleteFrom(T.classes).where('name', '=', from).execute();
    });
  }

  async getAllocations(consumer: string): Promise<ConsumerAllocations | undefined> {
    return this.q.consumerView(this.q.db, normalizeUuid(consumer, 'consumer uuid'));
  }

  async setAllocations(consumer: string, input: AllocationsInput): Promise<ConsumerAllocations> {
    const uuid = normalizeUuid(consumer, 'consumer uuid');
    return this.q.writeConsumer(uuid, input);
  }

  async deleteAllocations(
    consumer: string,
    options: { consumerGeneration?: number } = {},
  ): Promise<void> {
    const uuid = normalizeUuid(consumer, 'consumer uuid');
    const row = await this.q.consumerView(this.q.db, uuid);
    if (!row) throw consumerNotFound(uuid);
    await this.q.write(
      {
        allocations: {
          [uuid]: {
            projectId: row.projectId,
            userId: row.userId,
            consumerGeneration: options.consumerGeneration ?? row.consumerGeneration,
            allocations: {},
          },
        },
      },
      { keepGenerationsOnRemoval: true },
    );
  }

  async getProviderAllocations(
    uuid: string,
  ): Promise<{ generation: number; allocations: Record<string, Resources> }> {
    const rp = await this.q.readProvider(uuid);
    const rows = await this.q.run(
      this.q.db,
      `select consumer_uuid, resource_class, used from ${T.allocations} where provider_uuid = ?`,
      [rp.uuid],
    );
    const allocations: Record<string, Resources> = {};
    for (const r of rows)
      (allocations[String(r.consumer_uuid)] ??= {})[String(r.resource_class)] = Number(r.used);
    return { generation: rp.generation, allocations };
  }

  async getUsages(uuid: string): Promise<{ generation: number; usages: Resources }> {
    const rp = await this.q.readProvider(uuid);
    const usages: Resources = {};
    for (const r of await this.q.run(
      this.q.db,
      `select resource_class from ${T.inventories} where provider_uuid = ?`,
      [rp.uuid],
    ))
      usages[String(r.resource_class)] = 0;
    for (const r of await this.q.run(
      this.q.db,
      `select resource_class, sum(used) as used from ${T.allocations} where provider_uuid = ? group by resource_class`,
      [rp.uuid],
    ))
      usages[String(r.resource_class)] = Number(r.used);
    return { generation: rp.generation, usages };
  }

  async getTotalUsages(filter: { projectId: string; userId?: string }): Promise<TotalUsages> {
    const params: unknown[] = [filter.projectId];
    let where = 'c.project_id = ?';
    if (filter.userId !== undefined) {
      where += ' and c.user_id = ?';
      params.push(filter.userId);
    }
    const rows = await this.q.run(
      this.q.db,
      `select a.consumer_uuid, c.consumer_type, a.resource_class, a.used from ${T.allocations} a join ${T.consumers} c on c.uuid = a.consumer_uuid where ${where}`,
      params,
    );
    return totalUsages(
      rows.map((r) => ({
        consumer: String(r.consumer_uuid),
        consumerType: r.consumer_type == null ? null : String(r.consumer_type),
        rc: String(r.resource_class),
        used: Number(r.used),
      })),
    );
  }

  /** Every table the candidate search reads, from one transaction (see `allocationCandidates`). */
  candidateSnapshot(): Promise<CandidateSnapshot> {
    return readCandidateSnapshot(this.q);
  }

  async getAggregates(uuid: string): Promise<{ generation: number; aggregates: string[] }> {
    const rp = await this.q.readProvider(uuid);
    const rows = await this.q.run(
      this.q.db,
      `select aggregate_uuid from ${T.aggregates} where provider_uuid = ? order by aggregate_uuid`,
      [rp.uuid],
    );
    return { generation: rp.generation, aggregates: rows.map((r) => String(r.aggregate_uuid)) };
  }

  async setAggregates(
    uuid: string,
    input: { generation?: number; aggregates: string[] },
  ): Promise<{ generation: number; aggregates: string[] }> {
    const list = checkAggregates(input.aggregates);
    return this.q.tx(async (trx) => {
      const rp = await this.q.lockedProvider(trx, uuid);
      if (input.generation !== undefined && input.generation !== rp.generation)
        throw conflictGeneration(rp, input.generation);
      await this.q.run(trx, `delete from ${T.aggregates} where provider_uuid = ?`, [rp.uuid]);
      if (list.length)
        await this.q.run(
          trx,
          `insert into ${T.aggregates} (provider_uuid, aggregate_uuid) values ${marks(list.length, '(?, ?)')}`,
          list.flatMap((a) => [rp.uuid, a]),
        );
      let generation = rp.generation;
      if (input.generation !== undefined) {
        generation++;
        await this.q.run(trx, `update ${T.providers} set generation = ? where uuid = ?`, [
          generation,
          rp.uuid,
        ]);
      }
      return { generation, aggregates: list };
    });
  }

  async getAllocationsForProviderTree(
    rootUuid: string,
  ): Promise<Record<string, ConsumerAllocations>> {
    const root = (await this.q.readProvider(rootUuid)).rootProviderUuid;
    const inTree = this.q.db
      .selectFrom(`${T.allocations} as a`)
      .innerJoin(`${T.providers} as p`, 'p.uuid', 'a.provider_uuid')
      .select('a.consumer_uuid')
      .where('p.root_uuid', '=', root);
    const rows = (await this.q.db
      .selectFrom(`${T.allocations} as x`)
      .innerJoin(`${T.consumers} as c`, 'c.uuid', 'x.consumer_uuid')
      .select([
        'x.consumer_uuid',
        'x.provider_uuid',
        'x.resource_class',
        'x.used',
        'c.project_id',
        'c.user_id',
        'c.generation',
        'c.consumer_type',
      ])
      .where('x.consumer_uuid', 'in', inTree)
      .orderBy('x.consumer_uuid')
      .orderBy('x.ordinal')
      .orderBy('x.provider_uuid')
      .orderBy('x.resource_class')
      .execute()) as Record<string, unknown>[];
    const out: Record<string, ConsumerAllocations> = {};
    for (const r of rows) {
      const c = String(r.consumer_uuid);
      const entry = (out[c] ??= {
        projectId: String(r.project_id),
        userId: String(r.user_id),
        consumerGeneration: Number(r.generation),
        ...(r.consumer_type == null ? {} : { consumerType: String(r.consumer_type) }),
        allocations: {},
      });
      (entry.allocations[String(r.provider_uuid)] ??= {})[String(r.resource_class)] = Number(
        r.used,
      );
    }
    return out;
  }

  reshape(req: ReshapeRequest): Promise<ReshapeResult> {
    return this.q.write(req, { reshapeGenerations: true });
  }

  async checkReshape(req: ReshapeRequest): Promise<ReshapeReport> {
    const prepared = prepare(req);
    const marker = new Error('dry run');
    let report: ReturnType<typeof buildReport> | undefined;
    // Run the checks with the rows locked, then roll back.
    await this.q
      .tx(async (trx) => {
        const snap = await this.q.snapshot(trx, prepared);
        report = buildReport(snap, prepared.req, plan(snap, prepared.req, { collect: true }));
        throw marker;
      })
      .catch((e: unknown) => {
        if (e !== marker) throw e;
      });
    return report!;
  }

  async close(): Promise<void> {
    // The database belongs to the caller.
  }

  async [Symbol.asyncDispose](): Promise<void> {}
}
