import { randomUUID } from 'node:crypto';
import { ReshapeError } from './errors.js';
import {
  plan,
  prepare,
  type PlanOptions,
  type AllocationRow,
  type ConsumerRow,
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
  type ResourceProvider,
  type ReshapeRequest,
  type ReshapeResult,
  type Resources,
} from './model.js';
import {
  buildReport,
  checkAggregates,
  parentsFirst,
  rowsToMap,
  totalUsages,
  type ReshapeStore,
  type ProviderFilter,
  type StoreOptions,
} from './store.js';
import {
  checkCustomName,
  checkTraits,
  conflict,
  conflictGeneration,
  notFound,
  standardTraitsOption,
} from './shared.js';

/** A store in process memory. Every operation is atomic (it runs without yielding). */
export function memoryStore(options: StoreOptions = {}): ReshapeStore {
  const standardTraits = standardTraitsOption('memoryStore', options.standardTraits);
  const providers = new Map<string, ResourceProvider>();
  const names = new Map<string, string>();
  const inventories = new Map<string, Record<string, Inventory>>();
  const traits = new Map<string, Set<string>>();
  const consumers = new Map<string, ConsumerRow>();
  const allocations = new Map<string, AllocationRow[]>();
  const byProvider = new Map<string, Map<string, AllocationRow[]>>();
  const customClasses = new Set<string>();
  const customTraits = new Set<string>();
  const aggregates = new Map<string, string[]>();
  let closed = false;

  const open = (): void => {
    if (closed) throw new ReshapeError('reshape.invalid_input', 'the store is closed');
  };
  const provider = (uuid: string): ResourceProvider => {
    const p = providers.get(normalizeUuid(uuid, 'provider uuid'));
    if (!p) throw notFound(uuid);
    return p;
  };
  const classExists = (rc: string): boolean => isStandardResourceClass(rc) || customClasses.has(rc);
  const usageOf = (rp: string): Map<string, number> => {
    const out = new Map<string, number>();
    for (const rows of byProvider.get(rp)?.values() ?? [])
      for (const r of rows) out.set(r.rc, (out.get(r.rc) ?? 0) + r.used);
    return out;
  };
  const copy = (p: ResourceProvider): ResourceProvider => ({ ...p });

  function snapshot(req: ReturnType<typeof prepare>): Snapshot {
    const uuids = new Set(req.providers);
    const consumerRows = new Map<string, ConsumerRow>();
    const old = new Map<string, AllocationRow[]>();
    for (const c of req.req.allocations.keys()) {
      const row = consumers.get(c);
      if (row) consumerRows.set(c, row);
      const rows = allocations.get(c) ?? [];
      old.set(c, rows);
      for (const r of rows) uuids.add(r.rp);
    }
    const snapProviders = new Map<string, ResourceProvider>();
    const snapInventories = new Map<string, Record<string, Inventory>>();
    const usage = new Map<string, Map<string, number>>();
    for (const uuid of uuids) {
      const p = providers.get(uuid);
      if (!p) continue;
      snapProviders.set(uuid, p);
      snapInventories.set(uuid, inventories.get(uuid) ?? {});
      usage.set(uuid, usageOf(uuid));
    }
    return {
      providers: snapProviders,
      inventories: snapInventories,
      usage,
      consumers: consumerRows,
      oldAllocations: old,
      resourceClassExists: classExists,
    };
  }

  function write(request: ReshapeRequest, planOptions: PlanOptions = {}): ReshapeResult {
    open();
    const prepared = prepare(request);
    const snap = snapshot(prepared);
    const p = plan(snap, prepared.req, planOptions);
    // Apply: nothing below can fail.
    for (const [rp, inv] of p.inventories) inventories.set(rp, inv);
    for (const [rp, generation] of p.providerGenerations) {
      providers.set(rp, { ...providers.get(rp)!, generation });
    }
    const consumerGenerations: Record<string, number | null> = {};
    for (const [consumer, w] of p.consumers) {
      for (const r of allocations.get(consumer) ?? []) byProvider.get(r.rp)?.delete(consumer);
      if (w.generation === null) {
        consumers.delete(consumer);
        allocations.delete(consumer);
      } else {
        consumers.set(consumer, {
          projectId: w.projectId,
          userId: w.userId,
          generation: w.generation,
          consumerType: w.consumerType,
        });
        allocations.set(consumer, w.rows);
        for (const r of w.rows) {
          let m = byProvider.get(r.rp);
          if (!m) byProvider.set(r.rp, (m = new Map()));
          let list = m.get(consumer);
          if (!list) m.set(consumer, (list = []));
          list.push(r);
        }
      }
      consumerGenerations[consumer] = w.generation;
    }
    return {
      providerGenerations: Object.fromEntries(p.providerGenerations),
      consumerGenerations,
    };
  }

  const consumerView = (consumer: string): ConsumerAllocations | undefined => {
    const row = consumers.get(consumer);
    if (!row) return undefined;
    return {
      projectId: row.projectId,
      userId: row.userId,
      consumerGeneration: row.generation,
      ...(row.consumerType === null ? {} : { consumerType: row.consumerType }),
      allocations: rowsToMap(allocations.get(consumer) ?? []),
    };
  };

  const treeOf = (uuid: string): ResourceProvider[] => {
    const root = provider(uuid).rootProviderUuid;
    return [...providers.values()].filter((p) => p.rootProviderUuid === root);
  };

  const store: ReshapeStore = {
    async createProvider(input) {
      open();
      const name = checkName(input.name);
      const uuid = normalizeUuid(input.uuid ?? randomUUID(), 'provider uuid');
      const parent =
        input.parentProviderUuid == null ? undefined : provider(input.parentProviderUuid);
      if (providers.has(uuid)) throw conflict(`resource provider ${uuid} already exists`, { uuid });
      if (names.has(name))
        throw conflict(`a resource provider named ${JSON.stringify(name)} already exists`, {
          name,
        });
      const rp: ResourceProvider = {
        uuid,
        name,
        parentProviderUuid: parent?.uuid ?? null,
        rootProviderUuid: parent?.rootProviderUuid ?? uuid,
        generation: 0,
      };
      providers.set(uuid, rp);
      names.set(name, uuid);
      return copy(rp);
    },
    async getProvider(uuid) {
      open();
      const p = providers.get(normalizeUuid(uuid, 'provider uuid'));
      return p && copy(p);
    },
    async listProviders(filter: ProviderFilter = {}) {
      open();
      let list = filter.inTree ? treeOf(filter.inTree) : [...providers.values()];
      if (filter.name !== undefined) list = list.filter((p) => p.name === filter.name);
      if (filter.uuid !== undefined) {
        const u = normalizeUuid(filter.uuid, 'provider uuid');
        list = list.filter((p) => p.uuid === u);
      }
      return parentsFirst(list.map(copy));
    },
    async updateProvider(uuid, input) {
      open();
      const rp = provider(uuid);
      if (input.generation !== undefined && input.generation !== rp.generation) {
        throw conflictGeneration(rp, input.generation);
      }
      const name = input.name === undefined ? rp.name : checkName(input.name);
      if (name !== rp.name && names.has(name))
        throw conflict(`a resource provider named ${JSON.stringify(name)} already exists`, {
          name,
        });
      let parent = rp.parentProviderUuid;
      let root = rp.rootProviderUuid;
      if (input.parentProviderUuid !== undefined && input.parentProviderUuid !== parent) {
        if (input.parentProviderUuid === null) {
          parent = null;
          root = rp.uuid;
        } else {
          const np = provider(input.parentProviderUuid);
          for (let a: ResourceProvider | undefined = np; a;) {
            if (a.uuid === rp.uuid)
              throw new ReshapeError(
                'reshape.invalid_input',
                `cannot move resource provider ${rp.uuid} under its own descendant ${np.uuid}`,
                { details: { uuid: rp.uuid, parent: np.uuid } },
              );
            a = a.parentProviderUuid ? providers.get(a.parentProviderUuid) : undefined;
          }
          parent = np.uuid;
          root = np.rootProviderUuid;
        }
      }
      const updated = { ...rp, name, parentProviderUuid: parent };
      names.delete(rp.name);
      names.set(name, rp.uuid);
      providers.set(rp.uuid, { ...updated, rootProviderUuid: root });
      if (root !== rp.rootProviderUuid) {
        // Re-root the whole subtree.
        const stack = [rp.uuid];
        while (stack.length) {
          const u = stack.pop()!;
          for (const c of providers.values()) {
            if (c.parentProviderUuid === u) {
              providers.set(c.uuid, { ...c, rootProviderUuid: root });
              stack.push(c.uuid);
            }
          }
          const self = providers.get(u)!;
          providers.set(u, { ...self, rootProviderUuid: root });
        }
      }
      return copy(providers.get(rp.uuid)!);
    },
    async deleteProvider(uuid) {
      open();
      const rp = provider(uuid);
      for (const p of providers.values()) {
        if (p.parentProviderUuid === rp.uuid)
          throw new ReshapeError(
            'reshape.provider_has_children',
            `resource provider ${rp.uuid} has children; delete them first`,
            { details: { uuid: rp.uuid, child: p.uuid } },
          );
      }
      if ((byProvider.get(rp.uuid)?.size ?? 0) > 0)
        throw new ReshapeError(
          'reshape.provider_in_use',
          `resource provider ${rp.uuid} still has allocations`,
          { details: { uuid: rp.uuid } },
        );
      providers.delete(rp.uuid);
      names.delete(rp.name);
      inventories.delete(rp.uuid);
      traits.delete(rp.uuid);
      aggregates.delete(rp.uuid);
      byProvider.delete(rp.uuid);
    },
    async getInventories(uuid) {
      open();
      const rp = provider(uuid);
      return { generation: rp.generation, inventories: { ...(inventories.get(rp.uuid) ?? {}) } };
    },
    async setInventories(uuid, input) {
      const rp = provider(uuid);
      const result = write(
        { inventories: { [rp.uuid]: input } },
        { allowOvercommittedInventories: true },
      );
      return {
        generation: result.providerGenerations[rp.uuid]!,
        inventories: { ...(inventories.get(rp.uuid) ?? {}) },
      };
    },
    async getTraits(uuid) {
      open();
      const rp = provider(uuid);
      return { generation: rp.generation, traits: [...(traits.get(rp.uuid) ?? [])].sort() };
    },
    async setTraits(uuid, input) {
      open();
      const rp = provider(uuid);
      if (input.generation !== rp.generation) throw conflictGeneration(rp, input.generation);
      checkTraits(input.traits, standardTraits, (t) => customTraits.has(t));
      traits.set(rp.uuid, new Set(input.traits));
      providers.set(rp.uuid, { ...rp, generation: rp.generation + 1 });
      return { generation: rp.generation + 1, traits: [...input.traits].sort() };
    },
    async listTraits() {
      open();
      const names = new Set<string>(customTraits);
      if (standardTraits) for (const t of standardTraits) names.add(t);
      else for (const set of traits.values()) for (const t of set) names.add(t);
      return [...names].sort();
    },
    async createTrait(name) {
      open();
      checkCustomName(name, 'trait');
      if (customTraits.has(name)) return false;
      customTraits.add(name);
      return true;
    },
    async listResourceClasses() {
      open();
      return [...STANDARD_RESOURCE_CLASSES, ...[...customClasses].sort()];
    },
    async createResourceClass(name) {
      open();
      checkCustomName(name, 'resource class');
      if (customClasses.has(name)) return false;
      customClasses.add(name);
      return true;
    },
    async deleteResourceClass(name) {
      open();
      checkResourceClassName(name);
      if (!customClasses.has(name))
        throw new ReshapeError(
          'reshape.resource_class_not_found',
          isStandardResourceClass(name)
            ? `${name} is a standard resource class and cannot be deleted`
            : `resource class ${name} does not exist`,
          { details: { resourceClass: name } },
        );
      for (const [rp, inv] of inventories) {
        if (inv[name])
          throw new ReshapeError(
            'reshape.resource_class_in_use',
            `resource class ${name} has inventory on resource provider ${rp}`,
            { details: { resourceClass: name, uuid: rp } },
          );
      }
      customClasses.delete(name);
    },
    async getAllocations(consumer) {
      open();
      return consumerView(normalizeUuid(consumer, 'consumer uuid'));
    },
    async setAllocations(consumer, input) {
      const uuid = normalizeUuid(consumer, 'consumer uuid');
      write({ allocations: { [uuid]: input } });
      return (
        consumerView(uuid) ?? {
          projectId: input.projectId,
          userId: input.userId,
          consumerGeneration: null,
          allocations: {},
        }
      );
    },
    async deleteAllocations(consumer, options = {}) {
      open();
      const uuid = normalizeUuid(consumer, 'consumer uuid');
      const row = consumers.get(uuid);
      if (!row)
        throw new ReshapeError(
          'reshape.consumer_not_found',
          `consumer ${uuid} has no allocations`,
          { details: { consumer: uuid } },
        );
      write({
        allocations: {
          [uuid]: {
            projectId: row.projectId,
            userId: row.userId,
            ...(options.consumerGeneration === undefined
              ? {}
              : { consumerGeneration: options.consumerGeneration }),
            allocations: {},
          },
        },
      });
    },
    async getProviderAllocations(uuid) {
      open();
      const rp = provider(uuid);
      const out: Record<string, Resources> = {};
      for (const [consumer, rows] of byProvider.get(rp.uuid) ?? []) {
        const r: Resources = {};
        for (const row of rows) r[row.rc] = row.used;
        out[consumer] = r;
      }
      return { generation: rp.generation, allocations: out };
    },
    async getUsages(uuid) {
      open();
      const rp = provider(uuid);
      const usages: Resources = {};
      for (const rc of Object.keys(inventories.get(rp.uuid) ?? {})) usages[rc] = 0;
      for (const [rc, n] of usageOf(rp.uuid)) usages[rc] = n;
      return { generation: rp.generation, usages };
    },
    async getTotalUsages(filter) {
      open();
      const rows: { consumer: string; consumerType: string | null; rc: string; used: number }[] =
        [];
      for (const [consumer, row] of consumers) {
        if (row.projectId !== filter.projectId) continue;
        if (filter.userId !== undefined && row.userId !== filter.userId) continue;
        for (const r of allocations.get(consumer) ?? [])
          rows.push({ consumer, consumerType: row.consumerType, rc: r.rc, used: r.used });
      }
      return totalUsages(rows);
    },
    async getAggregates(uuid) {
      open();
      const rp = provider(uuid);
      return { generation: rp.generation, aggregates: [...(aggregates.get(rp.uuid) ?? [])] };
    },
    async setAggregates(uuid, input) {
      open();
      const rp = provider(uuid);
      if (input.generation !== undefined && input.generation !== rp.generation)
        throw conflictGeneration(rp, input.generation);
      const list = checkAggregates(input.aggregates);
      aggregates.set(rp.uuid, list);
      const generation = input.generation === undefined ? rp.generation : rp.generation + 1;
      providers.set(rp.uuid, { ...rp, generation });
      return { generation, aggregates: [...list] };
    },
    async getAllocationsForProviderTree(rootUuid) {
      open();
      const tree = new Set(treeOf(rootUuid).map((p) => p.uuid));
      const out: Record<string, ConsumerAllocations> = {};
      for (const rp of tree) {
        for (const consumer of byProvider.get(rp)?.keys() ?? []) {
          out[consumer] ??= consumerView(consumer)!;
        }
      }
      return out;
    },
    async reshape(req) {
      return write(req);
    },
    async checkReshape(req) {
      open();
      const prepared = prepare(req);
      const snap = snapshot(prepared);
      return buildReport(snap, prepared.req, plan(snap, prepared.req, { collect: true }));
    },
    async close() {
      closed = true;
    },
    async [Symbol.asyncDispose]() {
      closed = true;
    },
  };
  return store;
}
