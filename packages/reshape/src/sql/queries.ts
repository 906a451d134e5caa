/**
 * The statements of the SQL store: row locking, the snapshot a write is checked against, the
 * write itself, and the reads the store shares. One transaction per write, rows locked in uuid
 * order.
 */
import type { Database, Kysely } from '@rigging/sql';
import { CompiledQuery, isUniqueViolation } from './peer.js';
import { ReshapeError } from '../errors.js';
import {
  plan,
  prepare,
  type AllocationRow,
  type PlanOptions,
  type ConsumerRow,
  type ConsumerWrite,
  type Snapshot,
} from '../engine.js';
import {
  isStandardResourceClass,
  normalizeUuid,
  type ConsumerAllocations,
  type Inventory,
  type ReshapeRequest,
  type ReshapeResult,
  type ResourceProvider,
} from '../model.js';
import { conflict, notFound } from '../shared.js';
import { rowsToMap } from '../store.js';
import { T } from './schema.js';

/** @internal */
export type Db = Kysely<any>;

/** @internal */
export interface ProviderRecord {
  uuid: string;
  name: string;
  parent_uuid: string | null;
  root_uuid: string;
  generation: number | string;
}

/** @internal */
export const CHUNK = 500;
/** Rows or ids per bulk statement (at most 4 × this many parameters; every backend allows more). */
export const BULK = 4000;
/** @internal */
export function chunks<T>(items: readonly T[], size = CHUNK): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** @internal */
export function toProvider(r: ProviderRecord): ResourceProvider {
  return {
    uuid: r.uuid,
    name: r.name,
    parentProviderUuid: r.parent_uuid ?? null,
    rootProviderUuid: r.root_uuid,
    generation: Number(r.generation),
  };
}

/** @internal */
export function toInventory(r: Record<string, unknown>): Inventory {
  return {
    total: Number(r.total),
    reserved: Number(r.reserved),
    minUnit: Number(r.min_unit),
    maxUnit: Number(r.max_unit),
    stepSize: Number(r.step_size),
    allocationRatio: Number(r.allocation_ratio),
  };
}

/** The statements of a store over `database`, sharing its transactions. @internal */
export function sqlQueries(database: Database) {
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

  return {
    db,
    dialect,
    locking,
    tx,
    lockProviders,
    lockedProvider,
    customClasses,
    run,
    marks,
    forUpdate,
    selectIn,
    snapshot,
    groupBy,
    write,
    consumerView,
    findProvider,
    readProvider,
    insertName,
    duplicate,
  };
}

/** @internal */
export type SqlQueries = ReturnType<typeof sqlQueries>;
