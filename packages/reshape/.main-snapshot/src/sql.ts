/**
 * `@rigging/reshape/sql`: the store on SQLite, PostgreSQL or MySQL/MariaDB through
 * `@rigging/sql`. Every write runs in one transaction that locks the rows it reads (consumers
 * first, then providers, each in uuid order) with `SELECT … FOR UPDATE` under READ COMMITTED,
 * so concurrent writers on the same providers or consumers queue instead of interleaving;
 * SQLite serializes writers with `BEGIN IMMEDIATE`.
 */
import { randomUUID } from 'node:crypto';
import type { Database, Kysely, Migration } from '@rigging/sql';
import { CompiledQuery, isUniqueViolation } from './sql-peer.js';
import { ReshapeError } from './errors.js';
import {
  plan,
  prepare,
  type AllocationRow,
  type PlanOptions,
  type ConsumerRow,
  type ConsumerWrite,
  type Snapshot,
} from './engine.js';
import {
  checkName,
  checkResourceClassName,
  isStandardResourceClass,
  normalizeUuid,
  STANDARD_RESOURCE_CLASSES,
  type ConsumerAllocations,
  type Inventory,
  type ReshapeRequest,
  type ReshapeResult,
  type ResourceProvider,
  type Resources,
} from './model.js';
import { checkCustomName, checkTraits, conflict, conflictGeneration, notFound } from './shared.js';
import {
  buildReport,
  checkAggregates,
  parentsFirst,
  rowsToMap,
  totalUsages,
  type ReshapeStore,
} from './store.js';

const T = {
  providers: 'rigging_reshape_providers',
  inventories: 'rigging_reshape_inventories',
  consumers: 'rigging_reshape_consumers',
  allocations: 'rigging_reshape_allocations',
  traits: 'rigging_reshape_traits',
  customTraits: 'rigging_reshape_custom_traits',
  classes: 'rigging_reshape_resource_classes',
  aggregates: 'rigging_reshape_aggregates',
} as const;

/** The schema of `@rigging/reshape/sql` (namespace `reshape`). */
export const migrations: readonly Migration[] = [
  {
    name: 'initial',
    async up(db) {
      await db.schema
        .createTable(T.providers)
        .addColumn('uuid', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('name', 'varchar(200)', (c) => c.notNull().unique())
        .addColumn('parent_uuid', 'varchar(36)')
        .addColumn('root_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('generation', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex(`${T.providers}_root`)
        .on(T.providers)
        .column('root_uuid')
        .execute();
      await db.schema
        .createTable(T.inventories)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('resource_class', 'varchar(255)', (c) => c.notNull())
        .addColumn('total', 'integer', (c) => c.notNull())
        .addColumn('reserved', 'integer', (c) => c.notNull())
        .addColumn('min_unit', 'integer', (c) => c.notNull())
        .addColumn('max_unit', 'integer', (c) => c.notNull())
        .addColumn('step_size', 'integer', (c) => c.notNull())
        .addColumn('allocation_ratio', 'double precision', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.inventories}_pk`, ['provider_uuid', 'resource_class'])
        .execute();
      await db.schema
        .createTable(T.consumers)
        .addColumn('uuid', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('project_id', 'varchar(255)', (c) => c.notNull())
        .addColumn('user_id', 'varchar(255)', (c) => c.notNull())
        .addColumn('generation', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable(T.allocations)
        .addColumn('consumer_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('resource_class', 'varchar(255)', (c) => c.notNull())
        .addColumn('used', 'integer', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.allocations}_pk`, [
          'consumer_uuid',
          'provider_uuid',
          'resource_class',
        ])
        .execute();
      await db.schema
        .createIndex(`${T.allocations}_provider`)
        .on(T.allocations)
        .columns(['provider_uuid', 'resource_class'])
        .execute();
      await db.schema
        .createTable(T.traits)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('trait', 'varchar(255)', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.traits}_pk`, ['provider_uuid', 'trait'])
        .execute();
      await db.schema
        .createTable(T.customTraits)
        .addColumn('name', 'varchar(255)', (c) => c.primaryKey())
        .execute();
      await db.schema
        .createTable(T.classes)
        .addColumn('name', 'varchar(255)', (c) => c.primaryKey())
        .execute();
    },
  },
  {
    name: 'consumer types and aggregates',
    async up(db) {
      await db.schema.alterTable(T.consumers).addColumn('consumer_type', 'varchar(255)').execute();
      await db.schema
        .createTable(T.aggregates)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('aggregate_uuid', 'varchar(36)', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.aggregates}_pk`, ['provider_uuid', 'aggregate_uuid'])
        .execute();
    },
  },
  {
    name: 'consumers by project',
    async up(db) {
      await db.schema
        .createIndex(`${T.consumers}_project`)
        .on(T.consumers)
        .columns(['project_id', 'user_id'])
        .execute();
    },
  },
];

type Db = Kysely<any>;

interface ProviderRecord {
  uuid: string;
  name: string;
  parent_uuid: string | null;
  root_uuid: string;
  generation: number | string;
}

const CHUNK = 500;
/** Rows or ids per bulk statement (at most 4 × this many parameters; every backend allows more). */
const BULK = 4000;
function chunks<T>(items: readonly T[], size = CHUNK): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

function toProvider(r: ProviderRecord): ResourceProvider {
  return {
    uuid: r.uuid,
    name: r.name,
    parentProviderUuid: r.parent_uuid ?? null,
    rootProviderUuid: r.root_uuid,
    generation: Number(r.generation),
  };
}

function toInventory(r: Record<string, unknown>): Inventory {
  return {
    total: Number(r.total),
    reserved: Number(r.reserved),
    minUnit: Number(r.min_unit),
    maxUnit: Number(r.max_unit),
    stepSize: Number(r.step_size),
    allocationRatio: Number(r.allocation_ratio),
  };
}

/** Options of {@link sqlStore}. */
export interface SqlStoreOptions {
  /** Apply the schema migrations first. @default true */
  migrate?: boolean;
}

/** A store over a `@rigging/sql` database (tables prefixed `rigging_reshape_`). */
export async function sqlStore(
  database: Database,
  options: SqlStoreOptions = {},
): Promise<ReshapeStore> {
  if (options.migrate ?? true) await database.migrate('reshape', migrations);
  const dialect = database.dialect;
  const db = database.db as Db;
  const locking = dialect !== 'sqlite';

  const tx = <R>(fn: (trx: Db) => Promise<R>): Promise<R> =>
    database.transaction(fn, locking ? { isolation: 'read committed' } : {});

  async function lockProviders(
    trx: Db,
    uuids: Iterable<string>,
  ): Promise<Map<string, ResourceProvider>> {
    const sorted = [...new Set(uuids)].sort();
    const out = new Map<string, ResourceProvider>();
    for (const part of chunks(sorted)) {
      let q = trx.selectFrom(T.providers).selectAll().where('uuid', 'in', part).orderBy('uuid');
      if (locking) q = q.forUpdate();
      for (const r of (await q.execute()) as ProviderRecord[]) out.set(r.uuid, toProvider(r));
    }
    return out;
  }

  async function lockedProvider(trx: Db, uuid: string): Promise<ResourceProvider> {
    const id = normalizeUuid(uuid, 'provider uuid');
    const p = (await lockProviders(trx, [id])).get(id);
    if (!p) throw notFound(id);
    return p;
  }

  async function customClasses(trx: Db): Promise<Set<string>> {
    const rows = (await trx.selectFrom(T.classes).select('name').execute()) as { name: string }[];
    return new Set(rows.map((r) => r.name));
  }

  /**
   * Runs a hand-written statement (`?` placeholders). The bulk statements of a write are built
   * here rather than with Kysely's builder: for thousands of rows, building and compiling the
   * query tree costs more than running it.
   */
  async function run(trx: Db, text: string, params: unknown[]): Promise<Record<string, unknown>[]> {
    let i = 0;
    const sqlText = dialect === 'postgres' ? text.replace(/\?/g, () => `$${++i}`) : text;
    const result = await trx.executeQuery(CompiledQuery.raw(sqlText, params));
    return result.rows as Record<string, unknown>[];
  }
  const marks = (n: number, each = '?'): string => Array(n).fill(each).join(', ');
  const forUpdate = locking ? ' for update' : '';

  /** `select … where column in (…)` over `ids` in chunks. */
  async function selectIn(
    trx: Db,
    head: string,
    column: string,
    ids: readonly string[],
    tail = '',
  ): Promise<Record<string, unknown>[]> {
    const out: Record<string, unknown>[] = [];
    for (const part of chunks(ids, BULK)) {
      const rows = await run(
        trx,
        `${head} where ${column} in (${marks(part.length)})${tail}`,
        part,
      );
      for (const r of rows) out.push(r);
    }
    return out;
  }

  async function snapshot(trx: Db, prepared: ReturnType<typeof prepare>): Promise<Snapshot> {
    const consumerIds = [...prepared.req.allocations.keys()].sort();
    const consumers = new Map<string, ConsumerRow>();
    const old = new Map<string, AllocationRow[]>();
    for (const r of await selectIn(
      trx,
      `select uuid, project_id, user_id, generation, consumer_type from ${T.consumers}`,
      'uuid',
      consumerIds,
      ` order by uuid${forUpdate}`,
    )) {
      consumers.set(String(r.uuid), {
        projectId: String(r.project_id),
        userId: String(r.user_id),
        generation: Number(r.generation),
        consumerType: r.consumer_type == null ? null : String(r.consumer_type),
      });
    }
    const uuids = new Set(prepared.providers);
    for (const c of consumerIds) old.set(c, []);
    for (const r of await selectIn(
      trx,
      `select consumer_uuid, provider_uuid, resource_class, used from ${T.allocations}`,
      'consumer_uuid',
      [...consumers.keys()],
    )) {
      const row: AllocationRow = {
        consumer: String(r.consumer_uuid),
        rp: String(r.provider_uuid),
        rc: String(r.resource_class),
        used: Number(r.used),
      };
      old.get(row.consumer)!.push(row);
      uuids.add(row.rp);
    }
    const providers = await lockProviders(trx, uuids);
    const inventories = new Map<string, Record<string, Inventory>>();
    const usage = new Map<string, Map<string, number>>();
    const ids = [...providers.keys()];
    for (const id of ids) {
      inventories.set(id, {});
      usage.set(id, new Map());
    }
    for (const r of await selectIn(trx, `select * from ${T.inventories}`, 'provider_uuid', ids))
      inventories.get(String(r.provider_uuid))![String(r.resource_class)] = toInventory(r);
    for (const r of await selectIn(
      trx,
      `select provider_uuid, resource_class, sum(used) as used from ${T.allocations}`,
      'provider_uuid',
      ids,
      ' group by provider_uuid, resource_class',
    ))
      usage.get(String(r.provider_uuid))!.set(String(r.resource_class), Number(r.used));
    const classes = await customClasses(trx);
    return {
      providers,
      inventories,
      usage,
      consumers,
      oldAllocations: old,
      resourceClassExists: (rc) => isStandardResourceClass(rc) || classes.has(rc),
    };
  }

  /** Groups `consumers` by a key, for one statement per group. */
  function groupBy<K>(items: Iterable<[K, string]>): Map<string, { key: K; consumers: string[] }> {
    const out = new Map<string, { key: K; consumers: string[] }>();
    for (const [key, consumer] of items) {
      const id = JSON.stringify(key);
      let g = out.get(id);
      if (!g) out.set(id, (g = { key, consumers: [] }));
      g.consumers.push(consumer);
    }
    return out;
  }

  async function write(
    request: ReshapeRequest,
    planOptions: PlanOptions = {},
  ): Promise<ReshapeResult> {
    const prepared = prepare(request);
    try {
      return await tx(async (trx) => {
        const snap = await snapshot(trx, prepared);
        const p = plan(snap, prepared.req, planOptions);
        for (const [rp, inv] of p.inventories) {
          await run(trx, `delete from ${T.inventories} where provider_uuid = ?`, [rp]);
          const entries = Object.entries(inv);
          if (entries.length === 0) continue;
          await run(
            trx,
            `insert into ${T.inventories} (provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio) values ${marks(entries.length, '(?, ?, ?, ?, ?, ?, ?, ?)')}`,
            entries.flatMap(([rc, i]) => [
              rp,
              rc,
              i.total,
              i.reserved,
              i.minUnit,
              i.maxUnit,
              i.stepSize,
              i.allocationRatio,
            ]),
          );
        }
        for (const [rp, generation] of p.providerGenerations)
          await run(trx, `update ${T.providers} set generation = ? where uuid = ?`, [
            generation,
            rp,
          ]);

        // Allocation rows: only the difference between the old rows and the new ones is written.
        const consumerGenerations: Record<string, number | null> = {};
        const deleted: string[] = [];
        const bumped: string[] = [];
        const created: [string, ConsumerWrite][] = [];
        const removed: [[string, string], string][] = [];
        const changed: [[string, string, number], string][] = [];
        const added: AllocationRow[] = [];
        for (const [consumer, w] of p.consumers) {
          consumerGenerations[consumer] = w.generation;
          const before = snap.oldAllocations.get(consumer) ?? [];
          if (w.generation === null) {
            if (w.existed) deleted.push(consumer);
            continue;
          }
          if (!w.existed) {
            created.push([consumer, w]);
            for (const r of w.rows) added.push(r);
            continue;
          }
          const oldRows = new Map(before.map((r) => [`${r.rp} ${r.rc}`, r.used]));
          for (const r of w.rows) {
            const key = `${r.rp} ${r.rc}`;
            const was = oldRows.get(key);
            if (was === undefined) added.push(r);
            else if (was !== r.used) changed.push([[r.rp, r.rc, r.used], consumer]);
            oldRows.delete(key);
          }
          for (const key of oldRows.keys()) {
            const [rp, rc] = key.split(' ') as [string, string];
            removed.push([[rp, rc], consumer]);
          }
          const row = snap.consumers.get(consumer)!;
          if (
            row.projectId !== w.projectId ||
            row.userId !== w.userId ||
            row.consumerType !== w.consumerType
          )
            await run(
              trx,
              `update ${T.consumers} set project_id = ?, user_id = ?, consumer_type = ?, generation = ? where uuid = ?`,
              [w.projectId, w.userId, w.consumerType, w.generation, consumer],
            );
          else bumped.push(consumer);
        }
        for (const part of chunks(deleted, BULK)) {
          await run(
            trx,
            `delete from ${T.allocations} where consumer_uuid in (${marks(part.length)})`,
            part,
          );
          await run(trx, `delete from ${T.consumers} where uuid in (${marks(part.length)})`, part);
        }
        for (const { key, consumers } of groupBy(removed).values())
          for (const part of chunks(consumers, BULK))
            await run(
              trx,
              `delete from ${T.allocations} where provider_uuid = ? and resource_class = ? and consumer_uuid in (${marks(part.length)})`,
              [...key, ...part],
            );
        for (const { key, consumers } of groupBy(changed).values())
          for (const part of chunks(consumers, BULK))
            await run(
              trx,
              `update ${T.allocations} set used = ? where provider_uuid = ? and resource_class = ? and consumer_uuid in (${marks(part.length)})`,
              [key[2], key[0], key[1], ...part],
            );
        for (const part of chunks(bumped, BULK))
          await run(
            trx,
            `update ${T.consumers} set generation = generation + 1 where uuid in (${marks(part.length)})`,
            part,
          );
        for (const part of chunks(created, BULK / 5))
          await run(
            trx,
            `insert into ${T.consumers} (uuid, project_id, user_id, consumer_type, generation) values ${marks(part.length, '(?, ?, ?, ?, ?)')}`,
            part.flatMap(([uuid, w]) => [
              uuid,
              w.projectId,
              w.userId,
              w.consumerType,
              w.generation,
            ]),
          );
        for (const part of chunks(added, BULK / 4))
          await run(
            trx,
            `insert into ${T.allocations} (consumer_uuid, provider_uuid, resource_class, used) values ${marks(part.length, '(?, ?, ?, ?)')}`,
            part.flatMap((r) => [r.consumer, r.rp, r.rc, r.used]),
          );
        return {
          providerGenerations: Object.fromEntries(p.providerGenerations),
          consumerGenerations,
        };
      });
    } catch (error) {
      if (isUniqueViolation(error))
        throw new ReshapeError(
          'reshape.concurrent_update',
          'a consumer was created concurrently by another writer; read it again and retry',
          { cause: error, details: { entity: 'consumer' } },
        );
      throw error;
    }
  }

  async function consumerView(trx: Db, consumer: string): Promise<ConsumerAllocations | undefined> {
    const rows = await run(
      trx,
      `select c.project_id, c.user_id, c.generation, c.consumer_type, a.provider_uuid, a.resource_class, a.used from ${T.consumers} c left join ${T.allocations} a on a.consumer_uuid = c.uuid where c.uuid = ?`,
      [consumer],
    );
    const row = rows[0];
    if (!row) return undefined;
    return {
      projectId: String(row.project_id),
      userId: String(row.user_id),
      consumerGeneration: Number(row.generation),
      ...(row.consumer_type == null ? {} : { consumerType: String(row.consumer_type) }),
      allocations: rowsToMap(
        rows
          .filter((r) => r.provider_uuid != null)
          .map((r) => ({
            consumer,
            rp: String(r.provider_uuid),
            rc: String(r.resource_class),
            used: Number(r.used),
          })),
      ),
    };
  }

  async function findProvider(uuid: string): Promise<ResourceProvider | undefined> {
    const id = normalizeUuid(uuid, 'provider uuid');
    const r = (await run(db, `select * from ${T.providers} where uuid = ?`, [id]))[0];
    return r && toProvider(r as unknown as ProviderRecord);
  }

  async function readProvider(uuid: string): Promise<ResourceProvider> {
    const p = await findProvider(uuid);
    if (!p) throw notFound(normalizeUuid(uuid, 'provider uuid'));
    return p;
  }

  /** Inserts a custom trait or class name; false when it already existed. */
  async function insertName(table: string, name: string): Promise<boolean> {
    try {
      await run(db, `insert into ${table} (name) values (?)`, [name]);
      return true;
    } catch (error) {
      if (isUniqueViolation(error)) return false;
      throw error;
    }
  }

  const duplicate = (error: unknown, name: string, uuid: string): never => {
    if (isUniqueViolation(error))
      throw conflict(
        `a resource provider named ${JSON.stringify(name)} or with uuid ${uuid} already exists`,
        { name, uuid },
      );
    throw error;
  };

  const store: ReshapeStore = {
    async createProvider(input) {
      const name = checkName(input.name);
      const uuid = normalizeUuid(input.uuid ?? randomUUID(), 'provider uuid');
      return tx(async (trx) => {
        let root = uuid;
        let parent: string | null = null;
        if (input.parentProviderUuid != null) {
          const p = await lockedProvider(trx, input.parentProviderUuid);
          root = p.rootProviderUuid;
          parent = p.uuid;
        }
        const existing = (await trx
          .selectFrom(T.providers)
          .select('uuid')
          .where((eb) => eb.or([eb('uuid', '=', uuid), eb('name', '=', name)]))
          .executeTakeFirst()) as { uuid: string } | undefined;
        if (existing) duplicate({ code: '23505' }, name, uuid);
        await trx
          .insertInto(T.providers)
          .values({ uuid, name, parent_uuid: parent, root_uuid: root, generation: 0 })
          .execute()
          .catch((e: unknown) => duplicate(e, name, uuid));
        return { uuid, name, parentProviderUuid: parent, rootProviderUuid: root, generation: 0 };
      });
    },
    getProvider: findProvider,
    async listProviders(filter = {}) {
      let q = db.selectFrom(T.providers).selectAll();
      if (filter.inTree !== undefined) {
        const root = (await readProvider(filter.inTree)).rootProviderUuid;
        q = q.where('root_uuid', '=', root);
      }
      if (filter.name !== undefined) q = q.where('name', '=', filter.name);
      if (filter.uuid !== undefined)
        q = q.where('uuid', '=', normalizeUuid(filter.uuid, 'provider uuid'));
      return parentsFirst(((await q.execute()) as ProviderRecord[]).map(toProvider));
    },
    async updateProvider(uuid, input) {
      return tx(async (trx) => {
        const rp = await lockedProvider(trx, uuid);
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
            const np = await lockedProvider(trx, input.parentProviderUuid);
            let cursor: string | null = np.uuid;
            while (cursor) {
              if (cursor === rp.uuid)
                throw new ReshapeError(
                  'reshape.invalid_input',
                  `cannot move resource provider ${rp.uuid} under its own descendant ${np.uuid}`,
                  { details: { uuid: rp.uuid, parent: np.uuid } },
                );
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
          .catch((e: unknown) => duplicate(e, name, rp.uuid));
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
    },
    async deleteProvider(uuid) {
      await tx(async (trx) => {
        const rp = await lockedProvider(trx, uuid);
        const child = (await trx
          .selectFrom(T.providers)
          .select('uuid')
          .where('parent_uuid', '=', rp.uuid)
          .executeTakeFirst()) as { uuid: string } | undefined;
        if (child)
          throw new ReshapeError(
            'reshape.provider_has_children',
            `resource provider ${rp.uuid} has children; delete them first`,
            {
              details: { uuid: rp.uuid, child: child.uuid },
            },
          );
        const used = await trx
          .selectFrom(T.allocations)
          .select('consumer_uuid')
          .where('provider_uuid', '=', rp.uuid)
          .executeTakeFirst();
        if (used)
          throw new ReshapeError(
            'reshape.provider_in_use',
            `resource provider ${rp.uuid} still has allocations`,
            {
              details: { uuid: rp.uuid },
            },
          );
        await trx.deleteFrom(T.inventories).where('provider_uuid', '=', rp.uuid).execute();
        await trx.deleteFrom(T.traits).where('provider_uuid', '=', rp.uuid).execute();
        await trx.deleteFrom(T.aggregates).where('provider_uuid', '=', rp.uuid).execute();
        await trx.deleteFrom(T.providers).where('uuid', '=', rp.uuid).execute();
      });
    },
    async getInventories(uuid) {
      const id = normalizeUuid(uuid, 'provider uuid');
      // One statement, so the generation and the rows come from the same snapshot.
      const rows = await run(
        db,
        `select p.generation as provider_generation, i.* from ${T.providers} p left join ${T.inventories} i on i.provider_uuid = p.uuid where p.uuid = ?`,
        [id],
      );
      if (rows.length === 0) throw notFound(id);
      const inventories: Record<string, Inventory> = {};
      for (const r of rows)
        if (r.resource_class != null) inventories[String(r.resource_class)] = toInventory(r);
      return { generation: Number(rows[0]!.provider_generation), inventories };
    },
    async setInventories(uuid, input) {
      const id = normalizeUuid(uuid, 'provider uuid');
      const r = await write(
        { inventories: { [id]: input } },
        { allowOvercommittedInventories: true },
      );
      const inv = await store.getInventories(id);
      return { generation: r.providerGenerations[id]!, inventories: inv.inventories };
    },
    async getTraits(uuid) {
      const rp = await readProvider(uuid);
      const rows = (await db
        .selectFrom(T.traits)
        .select('trait')
        .where('provider_uuid', '=', rp.uuid)
        .execute()) as {
        trait: string;
      }[];
      return { generation: rp.generation, traits: rows.map((r) => r.trait).sort() };
    },
    async setTraits(uuid, input) {
      return tx(async (trx) => {
        const rp = await lockedProvider(trx, uuid);
        const custom = new Set(
          (
            (await trx.selectFrom(T.customTraits).select('name').execute()) as { name: string }[]
          ).map((r) => r.name),
        );
        if (input.generation !== rp.generation) throw conflictGeneration(rp, input.generation);
        checkTraits(input.traits, (t) => custom.has(t));
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
    },
    async listTraits() {
      const custom = (await db.selectFrom(T.customTraits).select('name').execute()) as {
        name: string;
      }[];
      const used = (await db.selectFrom(T.traits).select('trait').distinct().execute()) as {
        trait: string;
      }[];
      return [...new Set([...custom.map((r) => r.name), ...used.map((r) => r.trait)])].sort();
    },
    async createTrait(name) {
      checkCustomName(name, 'trait');
      return insertName(T.customTraits, name);
    },
    async listResourceClasses() {
      return [...STANDARD_RESOURCE_CLASSES, ...[...(await customClasses(db))].sort()];
    },
    async createResourceClass(name) {
      checkCustomName(name, 'resource class');
      return insertName(T.classes, name);
    },
    async deleteResourceClass(name) {
      checkResourceClassName(name);
      await tx(async (trx) => {
        const exists = await trx
          .selectFrom(T.classes)
          .select('name')
          .where('name', '=', name)
          .executeTakeFirst();
        if (!exists)
          throw new ReshapeError(
            'reshape.resource_class_not_found',
            isStandardResourceClass(name)
              ? `${name} is a standard resource class and cannot be deleted`
              : `resource class ${name} does not exist`,
            { details: { resourceClass: name } },
          );
        const inv = (await trx
          .selectFrom(T.inventories)
          .select('provider_uuid')
          .where('resource_class', '=', name)
          .executeTakeFirst()) as { provider_uuid: string } | undefined;
        if (inv)
          throw new ReshapeError(
            'reshape.resource_class_in_use',
            `resource class ${name} has inventory on resource provider ${inv.provider_uuid}`,
            {
              details: { resourceClass: name, uuid: inv.provider_uuid },
            },
          );
        await trx.deleteFrom(T.classes).where('name', '=', name).execute();
      });
    },
    async getAllocations(consumer) {
      return consumerView(db, normalizeUuid(consumer, 'consumer uuid'));
    },
    async setAllocations(consumer, input) {
      const uuid = normalizeUuid(consumer, 'consumer uuid');
      await write({ allocations: { [uuid]: input } });
      return (
        (await consumerView(db, uuid)) ?? {
          projectId: input.projectId,
          userId: input.userId,
          consumerGeneration: null,
          allocations: {},
        }
      );
    },
    async deleteAllocations(consumer, options = {}) {
      const uuid = normalizeUuid(consumer, 'consumer uuid');
      const row = await consumerView(db, uuid);
      if (!row)
        throw new ReshapeError(
          'reshape.consumer_not_found',
          `consumer ${uuid} has no allocations`,
          {
            details: { consumer: uuid },
          },
        );
      await write({
        allocations: {
          [uuid]: {
            projectId: row.projectId,
            userId: row.userId,
            consumerGeneration: options.consumerGeneration ?? row.consumerGeneration,
            allocations: {},
          },
        },
      });
    },
    async getProviderAllocations(uuid) {
      const rp = await readProvider(uuid);
      const rows = await run(
        db,
        `select consumer_uuid, resource_class, used from ${T.allocations} where provider_uuid = ?`,
        [rp.uuid],
      );
      const allocations: Record<string, Resources> = {};
      for (const r of rows)
        (allocations[String(r.consumer_uuid)] ??= {})[String(r.resource_class)] = Number(r.used);
      return { generation: rp.generation, allocations };
    },
    async getUsages(uuid) {
      const rp = await readProvider(uuid);
      const usages: Resources = {};
      for (const r of await run(
        db,
        `select resource_class from ${T.inventories} where provider_uuid = ?`,
        [rp.uuid],
      ))
        usages[String(r.resource_class)] = 0;
      for (const r of await run(
        db,
        `select resource_class, sum(used) as used from ${T.allocations} where provider_uuid = ? group by resource_class`,
        [rp.uuid],
      ))
        usages[String(r.resource_class)] = Number(r.used);
      return { generation: rp.generation, usages };
    },
    async getTotalUsages(filter) {
      const params: unknown[] = [filter.projectId];
      let where = 'c.project_id = ?';
      if (filter.userId !== undefined) {
        where += ' and c.user_id = ?';
        params.push(filter.userId);
      }
      const rows = await run(
        db,
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
    },
    async getAggregates(uuid) {
      const rp = await readProvider(uuid);
      const rows = await run(
        db,
        `select aggregate_uuid from ${T.aggregates} where provider_uuid = ? order by aggregate_uuid`,
        [rp.uuid],
      );
      return { generation: rp.generation, aggregates: rows.map((r) => String(r.aggregate_uuid)) };
    },
    async setAggregates(uuid, input) {
      const list = checkAggregates(input.aggregates);
      return tx(async (trx) => {
        const rp = await lockedProvider(trx, uuid);
        if (input.generation !== undefined && input.generation !== rp.generation)
          throw conflictGeneration(rp, input.generation);
        await run(trx, `delete from ${T.aggregates} where provider_uuid = ?`, [rp.uuid]);
        if (list.length)
          await run(
            trx,
            `insert into ${T.aggregates} (provider_uuid, aggregate_uuid) values ${marks(list.length, '(?, ?)')}`,
            list.flatMap((a) => [rp.uuid, a]),
          );
        let generation = rp.generation;
        if (input.generation !== undefined) {
          generation++;
          await run(trx, `update ${T.providers} set generation = ? where uuid = ?`, [
            generation,
            rp.uuid,
          ]);
        }
        return { generation, aggregates: list };
      });
    },
    async getAllocationsForProviderTree(rootUuid) {
      const root = (await readProvider(rootUuid)).rootProviderUuid;
      const inTree = db
        .selectFrom(`${T.allocations} as a`)
        .innerJoin(`${T.providers} as p`, 'p.uuid', 'a.provider_uuid')
        .select('a.consumer_uuid')
        .where('p.root_uuid', '=', root);
      const rows = (await db
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
    },
    reshape: write,
    async checkReshape(req) {
      const prepared = prepare(req);
      const marker = new Error('dry run');
      let report: ReturnType<typeof buildReport> | undefined;
      // Run the checks with the rows locked, then roll back.
      await tx(async (trx) => {
        const snap = await snapshot(trx, prepared);
        report = buildReport(snap, prepared.req, plan(snap, prepared.req, { collect: true }));
        throw marker;
      }).catch((e: unknown) => {
        if (e !== marker) throw e;
      });
      return report!;
    },
    async close() {
      // The database belongs to the caller.
    },
    async [Symbol.asyncDispose]() {},
  };
  return store;
}
