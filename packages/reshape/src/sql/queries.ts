/**
 * The statements of the SQL store: row locking, the snapshot a write is checked against, the
 * write (its statements are in `write.ts`), and the reads the store shares. One transaction per
 * write, rows locked in uuid order.
 */
import type { Database, WithCommit } from '@rigging/sql';
import { CompiledQuery, isUniqueViolation, withCommit } from './peer.js';
import { ReshapeError } from '../errors.js';
import {
  plan,
  prepare,
  requestedClasses,
  type AllocationRow,
  type Plan,
  type PlanOptions,
  type ConsumerRow,
  type Snapshot,
} from '../engine.js';
import {
  isStandardResourceClass,
  type AllocationsInput,
  normalizeUuid,
  type ConsumerAllocations,
  type Inventory,
  type ReshapeRequest,
  type ReshapeResult,
  type ResourceProvider,
} from '../model.js';
import { conflict, deletedConsumer, notFound } from '../shared.js';
import { consumerAllocations } from '../store.js';
import { allocationOrder, T } from './schema.js';
import { applyPlan, type Statement } from './write.js';
import {
  BULK,
  chunks,
  marks,
  inventoryFromRow,
  toProvider,
  type Db,
  type ProviderRecord,
  type StatementRunner,
} from './rows.js';

/** The statements of a store over `database`, sharing its transactions. @internal */
export class SqlQueries implements StatementRunner {
  readonly dialect: Database['dialect'];
  readonly db: Db;
  /** Whether rows are locked with `FOR UPDATE` (SQLite serializes writers instead). */
  readonly locking: boolean;
  private readonly forUpdate: string;

  constructor(private readonly database: Database) {
    this.dialect = database.dialect;
    this.db = database.db as Db;
    this.locking = this.dialect !== 'sqlite';
    this.forUpdate = this.locking ? ' for update' : '';
  }

  /**
   * Runs `fn` in a transaction (READ COMMITTED where rows are locked); `fn` may end it with a
   * last statement to send with the commit.
   */
  tx<R>(fn: (trx: Db) => Promise<R | WithCommit<R>>): Promise<R> {
    return this.database.transaction(fn, this.locking ? { isolation: 'read committed' } : {});
  }

  /** Runs the reads of `fn` on one snapshot (REPEATABLE READ where the engine has levels). */
  snapshotTx<R>(fn: (trx: Db) => Promise<R>): Promise<R> {
    return this.database.transaction(fn, this.locking ? { isolation: 'repeatable read' } : {});
  }

  /** Reads (and locks, in uuid order) the providers that exist among `uuids`. */
  async lockProviders(trx: Db, uuids: Iterable<string>): Promise<Map<string, ResourceProvider>> {
    const sorted = [...new Set(uuids)].sort();
    const out = new Map<string, ResourceProvider>();
    for (const part of chunks(sorted)) {
      let q = trx.selectFrom(T.providers).selectAll().where('uuid', 'in', part).orderBy('uuid');
      if (this.locking) q = q.forUpdate();
      for (const r of (await q.execute()) as ProviderRecord[]) out.set(r.uuid, toProvider(r));
    }
    return out;
  }

  /** One provider, locked; `reshape.provider_not_found` when it does not exist. */
  async lockedProvider(trx: Db, uuid: string): Promise<ResourceProvider> {
    const id = normalizeUuid(uuid, 'provider uuid');
    const p = (await this.lockProviders(trx, [id])).get(id);
    if (!p) throw notFound(id);
    return p;
  }

  async customClasses(trx: Db): Promise<Set<string>> {
    const rows = (await trx.selectFrom(T.classes).select('name').execute()) as { name: string }[];
    return new Set(rows.map((r) => r.name));
  }

  /**
   * The custom traits among `names` that exist, locked (`FOR UPDATE`) until the transaction ends,
   * so that a concurrent `deleteTrait` of one of them waits for it, or it for the delete.
   * Anything in `names` that is not a custom trait's name is left to the caller's validation.
   */
  async lockCustomTraits(trx: Db, names: unknown): Promise<Set<string>> {
    const list: unknown[] = Array.isArray(names) ? names : [];
    const sorted = [
      ...new Set(list.filter((n): n is string => typeof n === 'string' && n.startsWith('CUSTOM_'))),
    ].sort();
    const out = new Set<string>();
    for (const part of chunks(sorted)) {
      let q = trx
        .selectFrom(T.customTraits)
        .select('name')
        .where('name', 'in', part)
        .orderBy('name');
      if (this.locking) q = q.forUpdate();
      for (const r of (await q.execute()) as { name: string }[]) out.add(r.name);
    }
    return out;
  }

  async customTraits(trx: Db): Promise<Set<string>> {
    const rows = (await trx.selectFrom(T.customTraits).select('name').execute()) as {
      name: string;
    }[];
    return new Set(rows.map((r) => r.name));
  }

  /**
   * Runs a hand-written statement (`?` placeholders). The bulk statements of a write are built
   * here rather than with Kysely's builder: for thousands of rows, building and compiling the
   * query tree costs more than running it.
   */
  async run(trx: Db, text: string, params: unknown[]): Promise<Record<string, unknown>[]> {
    const result = await trx.executeQuery(this.compiled({ text, params }));
    return result.rows as Record<string, unknown>[];
  }

  /** A hand-written statement as the dialect takes it (`$n` placeholders on PostgreSQL). */
  private compiled({ text, params }: Statement): CompiledQuery {
    let i = 0;
    const sqlText = this.dialect === 'postgres' ? text.replace(/\?/g, () => `$${++i}`) : text;
    return CompiledQuery.raw(sqlText, params);
  }

  /** `select … where column in (…)` over `ids` in chunks. */
  private async selectIn(
    trx: Db,
    head: string,
    column: string,
    ids: readonly string[],
    tail = '',
  ): Promise<Record<string, unknown>[]> {
    const out: Record<string, unknown>[] = [];
    for (const part of chunks(ids, BULK)) {
      const rows = await this.run(
        trx,
        `${head} where ${column} in (${marks(part.length)})${tail}`,
        part,
      );
      for (const r of rows) out.push(r);
    }
    return out;
  }

  /**
   * The rows a write is checked against, locked: consumers first, then providers. Three round
   * trips: the consumers with their allocations, the providers, their inventories with their
   * usage; a fourth reads the custom resource classes when the request names one.
   */
  async snapshot(trx: Db, prepared: ReturnType<typeof prepare>): Promise<Snapshot> {
    const consumerIds = [...prepared.req.allocations.keys()].sort();
    const consumers = new Map<string, ConsumerRow>();
    const old = new Map<string, AllocationRow[]>();
    const uuids = new Set(prepared.providers);
    for (const c of consumerIds) old.set(c, []);
    // Locks the consumers' rows. MySQL has no `for update of`: there their allocation rows are
    // locked too (a deadlock with another writer of them is retried, as any is).
    const lock = this.dialect === 'postgres' ? ' for update of c' : this.forUpdate;
    for (const r of await this.selectIn(
      trx,
      `select c.uuid, c.project_id, c.user_id, c.generation, c.consumer_type, a.provider_uuid, a.resource_class, a.used, a.ordinal from ${T.consumers} c left join ${T.allocations} a on a.consumer_uuid = c.uuid`,
      'c.uuid',
      consumerIds,
      ` order by c.uuid, ${allocationOrder('a')}${lock}`,
    )) {
      const consumer = String(r.uuid);
      if (!consumers.has(consumer)) {
        consumers.set(consumer, {
          projectId: String(r.project_id),
          userId: String(r.user_id),
          generation: Number(r.generation),
          consumerType: r.consumer_type == null ? null : String(r.consumer_type),
        });
      }
      if (r.provider_uuid == null) continue;
      const row: AllocationRow = {
        consumer,
        rp: String(r.provider_uuid),
        rc: String(r.resource_class),
        used: Number(r.used),
        ordinal: Number(r.ordinal),
      };
      old.get(consumer)!.push(row);
      uuids.add(row.rp);
    }
    const providers = await this.lockProviders(trx, uuids);
    const inventories = new Map<string, Record<string, Inventory>>();
    const usage = new Map<string, Map<string, number>>();
    const ids = [...providers.keys()];
    for (const id of ids) {
      inventories.set(id, {});
      usage.set(id, new Map());
    }
    for (const part of chunks(ids, BULK / 2)) {
      const list = marks(part.length);
      for (const r of await this.run(
        trx,
        `select 'i' as kind, provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio, null as used from ${T.inventories} where provider_uuid in (${list}) union all select 'u', provider_uuid, resource_class, null, null, null, null, null, null, sum(used) from ${T.allocations} where provider_uuid in (${list}) group by provider_uuid, resource_class`,
        [...part, ...part],
      )) {
        const rp = String(r.provider_uuid);
        const rc = String(r.resource_class);
        if (r.kind === 'i') inventories.get(rp)![rc] = inventoryFromRow(r);
        else usage.get(rp)!.set(rc, Number(r.used));
      }
    }
    const custom = [...requestedClasses(prepared.req)].some((rc) => !isStandardResourceClass(rc));
    const classes = custom ? await this.customClasses(trx) : new Set<string>();
    return {
      providers,
      inventories,
      usage,
      consumers,
      oldAllocations: old,
      resourceClassExists: (rc) => isStandardResourceClass(rc) || classes.has(rc),
    };
  }

  /** Checks and applies a write of inventories and allocations, in one transaction. */
  async write(request: ReshapeRequest, planOptions: PlanOptions = {}): Promise<ReshapeResult> {
    const p = await this.apply(request, planOptions);
    const consumerGenerations: Record<string, number | null> = {};
    for (const [consumer, w] of p.consumers) consumerGenerations[consumer] = w.generation;
    return { providerGenerations: Object.fromEntries(p.providerGenerations), consumerGenerations };
  }

  /**
   * Writes one consumer's allocations and returns them as written (from the write's own plan,
   * not read back: what this write committed, whatever a later writer did since).
   */
  async writeConsumer(consumer: string, input: AllocationsInput): Promise<ConsumerAllocations> {
    const w = (await this.apply({ allocations: { [consumer]: input } })).consumers.get(consumer)!;
    if (w.generation === null) return deletedConsumer(input);
    return consumerAllocations({ ...w, generation: w.generation }, w.rows);
  }

  /** Checks `request` and applies it in one transaction; returns the plan it applied. */
  private async apply(request: ReshapeRequest, planOptions: PlanOptions = {}): Promise<Plan> {
    const prepared = prepare(request);
    try {
      return await this.tx(async (trx) => {
        const snap = await this.snapshot(trx, prepared);
        const p = plan(snap, prepared.req, planOptions);
        // The last statement goes with the commit: on PostgreSQL, in the same round trip.
        const last = await applyPlan(this, trx, snap, p);
        return last ? withCommit({ compile: () => this.compiled(last) }, p) : p;
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

  /** A consumer with its allocations; `undefined` when it has none. */
  async consumerView(trx: Db, consumer: string): Promise<ConsumerAllocations | undefined> {
    const rows = await this.run(
      trx,
      `select c.project_id, c.user_id, c.generation, c.consumer_type, a.provider_uuid, a.resource_class, a.used from ${T.consumers} c left join ${T.allocations} a on a.consumer_uuid = c.uuid where c.uuid = ? order by ${allocationOrder('a')}`,
      [consumer],
    );
    const row = rows[0];
    if (!row) return undefined;
    return consumerAllocations(
      {
        projectId: String(row.project_id),
        userId: String(row.user_id),
        generation: Number(row.generation),
        consumerType: row.consumer_type == null ? null : String(row.consumer_type),
      },
      rows
        .filter((r) => r.provider_uuid != null)
        .map((r) => ({
          consumer,
          rp: String(r.provider_uuid),
          rc: String(r.resource_class),
          used: Number(r.used),
        })),
    );
  }

  async findProvider(uuid: string): Promise<ResourceProvider | undefined> {
    const id = normalizeUuid(uuid, 'provider uuid');
    const r = (await this.run(this.db, `select * from ${T.providers} where uuid = ?`, [id]))[0];
    return r && toProvider(r as unknown as ProviderRecord);
  }

  /** A provider; `reshape.provider_not_found` when it does not exist. */
  async readProvider(uuid: string): Promise<ResourceProvider> {
    const p = await this.findProvider(uuid);
    if (!p) throw notFound(normalizeUuid(uuid, 'provider uuid'));
    return p;
  }

  /** Inserts a custom trait or class name; false when it already existed. */
  async insertName(table: string, name: string): Promise<boolean> {
    try {
      await this.run(this.db, `insert into ${table} (name) values (?)`, [name]);
      return true;
    } catch (error) {
      if (isUniqueViolation(error)) return false;
      throw error;
    }
  }

  /** Rethrows a unique violation on a provider as `reshape.duplicate`, anything else as it is. */
  duplicate(error: unknown, name: string, uuid: string): never {
    if (isUniqueViolation(error))
      throw conflict(
        `a resource provider named ${JSON.stringify(name)} or with uuid ${uuid} already exists`,
        { name, uuid },
      );
    throw error;
  }
}
