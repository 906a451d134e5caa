import { randomUUID } from 'node:crypto';
import { emptySnapshot, type CandidateSnapshot } from './candidates-types.js';
import { ReshapeError } from './errors.js';
import {
  plan,
  prepare,
  type PlanOptions,
  type AllocationRow,
  type ConsumerRow,
  type ConsumerWrite,
  type Snapshot,
} from './engine.js';
import {
  checkName,
  checkResourceClassName,
  isStandardResourceClass,
  fitsInventory,
  normalizeUuid,
  type AllocationsInput,
  type ConsumerAllocations,
  type Inventory,
  type InventoryInput,
  type ProviderInventories,
  type ResourceProvider,
  type ReshapeRequest,
  type ReshapeResult,
  type Resources,
  type TotalUsages,
} from './model.js';
import {
  buildReport,
  checkAggregates,
  checkFilter,
  consumerAllocations,
  parentsFirst,
  totalUsages,
  type CreateProviderInput,
  type ProviderFilter,
  type ReshapeReport,
  type ReshapeStore,
  type StoreOptions,
  type TraitFilter,
  type UpdateProviderInput,
} from './store.js';
import {
  byAssociation,
  checkCustomName,
  checkDeletableTrait,
  checkFilterNames,
  checkTraits,
  consumerNotFound,
  deletedConsumer,
  movedUnderDescendant,
  providerHasChildren,
  providerInUse,
  resourceClassExists,
  resourceClassInUse,
  resourceClassNotFound,
  conflict,
  conflictGeneration,
  notFound,
  standardTraitsOption,
  traitInUse,
} from './shared.js';
import { STANDARD_RESOURCE_CLASSES } from './vocabulary.js';

/** A store in process memory. Every operation is atomic (it runs without yielding). */
export function memoryStore(options: StoreOptions = {}): ReshapeStore {
  return new MemoryStore(standardTraitsOption('memoryStore', options.standardTraits));
}

/** The state of {@link memoryStore} and its methods. */
class MemoryStore implements ReshapeStore {
  private readonly providers = new Map<string, ResourceProvider>();
  /** Provider uuid by name. */
  private readonly names = new Map<string, string>();
  private readonly inventories = new Map<string, Record<string, Inventory>>();
  private readonly traits = new Map<string, Set<string>>();
  private readonly consumers = new Map<string, ConsumerRow>();
  /** Allocation rows by consumer. */
  private readonly allocations = new Map<string, AllocationRow[]>();
  /** Allocation rows by provider, then consumer. */
  private readonly byProvider = new Map<string, Map<string, AllocationRow[]>>();
  private readonly customClasses = new Set<string>();
  private readonly customTraits = new Set<string>();
  private readonly aggregates = new Map<string, string[]>();
  private closed = false;

  constructor(private readonly standardTraits: ReadonlySet<string> | undefined) {}

  private open(): void {
    if (this.closed) throw new ReshapeError('reshape.invalid_input', 'the store is closed');
  }

  private provider(uuid: string): ResourceProvider {
    const p = this.providers.get(normalizeUuid(uuid, 'provider uuid'));
    if (!p) throw notFound(uuid);
    return p;
  }

  private usageOf(rp: string): Map<string, number> {
    const out = new Map<string, number>();
    for (const rows of this.byProvider.get(rp)?.values() ?? [])
      for (const r of rows) out.set(r.rc, (out.get(r.rc) ?? 0) + r.used);
    return out;
  }

  private snapshot(req: ReturnType<typeof prepare>): Snapshot {
    const uuids = new Set(req.providers);
    const consumerRows = new Map<string, ConsumerRow>();
    const old = new Map<string, AllocationRow[]>();
    for (const c of req.req.allocations.keys()) {
      const row = this.consumers.get(c);
      if (row) consumerRows.set(c, row);
      const rows = this.allocations.get(c) ?? [];
      old.set(c, rows);
      for (const r of rows) uuids.add(r.rp);
    }
    const providers = new Map<string, ResourceProvider>();
    const inventories = new Map<string, Record<string, Inventory>>();
    const usage = new Map<string, Map<string, number>>();
    for (const uuid of uuids) {
      const p = this.providers.get(uuid);
      if (!p) continue;
      providers.set(uuid, p);
      inventories.set(uuid, this.inventories.get(uuid) ?? {});
      usage.set(uuid, this.usageOf(uuid));
    }
    return {
      providers,
      inventories,
      usage,
      consumers: consumerRows,
      oldAllocations: old,
      resourceClassExists: (rc) => isStandardResourceClass(rc) || this.customClasses.has(rc),
    };
  }

  /** Checks and applies a write of inventories and allocations. */
  private write(request: ReshapeRequest, planOptions: PlanOptions = {}): ReshapeResult {
    this.open();
    const prepared = prepare(request);
    const p = plan(this.snapshot(prepared), prepared.req, planOptions);
    // Apply: nothing below can fail.
    for (const [rp, inv] of p.inventories) this.inventories.set(rp, inv);
    for (const [rp, generation] of p.providerGenerations) {
      this.providers.set(rp, { ...this.providers.get(rp)!, generation });
    }
    const consumerGenerations: Record<string, number | null> = {};
    for (const [consumer, w] of p.consumers) {
      this.setConsumer(consumer, w);
      consumerGenerations[consumer] = w.generation;
    }
    return {
      providerGenerations: Object.fromEntries(p.providerGenerations),
      consumerGenerations,
    };
  }

  /** Replaces a consumer and its allocation rows (a `null` generation deletes it). */
  private setConsumer(consumer: string, w: ConsumerWrite): void {
    for (const r of this.allocations.get(consumer) ?? [])
      this.byProvider.get(r.rp)?.delete(consumer);
    if (w.generation === null) {
      this.consumers.delete(consumer);
      this.allocations.delete(consumer);
      return;
    }
    this.consumers.set(consumer, {
      projectId: w.projectId,
      userId: w.userId,
      generation: w.generation,
      consumerType: w.consumerType,
    });
    this.allocations.set(consumer, w.rows);
    for (const r of w.rows) {
      let m = this.byProvider.get(r.rp);
      if (!m) this.byProvider.set(r.rp, (m = new Map()));
      let list = m.get(consumer);
      if (!list) m.set(consumer, (list = []));
      list.push(r);
    }
  }

  private consumerView(consumer: string): ConsumerAllocations | undefined {
    const row = this.consumers.get(consumer);
    return row && consumerAllocations(row, this.allocations.get(consumer) ?? []);
  }

  private treeOf(uuid: string): ResourceProvider[] {
    const root = this.provider(uuid).rootProviderUuid;
    return [...this.providers.values()].filter((p) => p.rootProviderUuid === root);
  }

  async createProvider(input: CreateProviderInput): Promise<ResourceProvider> {
    this.open();
    const name = checkName(input.name);
    const uuid = normalizeUuid(input.uuid ?? randomUUID(), 'provider uuid');
    const parent =
      input.parentProviderUuid == null ? undefined : this.provider(input.parentProviderUuid);
    if (this.providers.has(uuid))
      throw conflict(`resource provider ${uuid} already exists`, { uuid });
    if (this.names.has(name))
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
    this.providers.set(uuid, rp);
    this.names.set(name, uuid);
    return { ...rp };
  }

  async getProvider(uuid: string): Promise<ResourceProvider | undefined> {
    this.open();
    const p = this.providers.get(normalizeUuid(uuid, 'provider uuid'));
    return p && { ...p };
  }

  async listProviders(filter: ProviderFilter = {}): Promise<ResourceProvider[]> {
    this.open();
    let list = filter.inTree ? this.treeOf(filter.inTree) : [...this.providers.values()];
    if (filter.name !== undefined) list = list.filter((p) => p.name === filter.name);
    if (filter.uuid !== undefined) {
      const u = normalizeUuid(filter.uuid, 'provider uuid');
      list = list.filter((p) => p.uuid === u);
    }
    const f = checkFilter(filter);
    checkFilterNames(
      f,
      this.standardTraits,
      (t) => this.customTraits.has(t),
      (rc) => this.customClasses.has(rc),
    );
    list = list.filter((p) => {
      const aggregates = new Set(this.aggregates.get(p.uuid));
      const traits = this.traits.get(p.uuid) ?? new Set<string>();
      return (
        f.memberOf.every((anyOf) => anyOf.some((a) => aggregates.has(a))) &&
        !f.notMemberOf.some((a) => aggregates.has(a)) &&
        f.requiredTraits.every((anyOf) => anyOf.some((t) => traits.has(t))) &&
        !f.forbiddenTraits.some((t) => traits.has(t)) &&
        (f.resources.length === 0 || this.hasRoom(p.uuid, f.resources))
      );
    });
    return parentsFirst(list.map((p) => ({ ...p })));
  }

  /** Whether a provider has room for every `[class, amount]` of `resources`. */
  private hasRoom(uuid: string, resources: [string, number][]): boolean {
    const inventories = this.inventories.get(uuid) ?? {};
    const usage = this.usageOf(uuid);
    return resources.every(([rc, amount]) => {
      const inv = inventories[rc];
      return inv !== undefined && fitsInventory(inv, usage.get(rc) ?? 0, amount);
    });
  }

  async updateProvider(
    uuid: string,
    input: UpdateProviderInput & { generation?: number },
  ): Promise<ResourceProvider> {
    this.open();
    const rp = this.provider(uuid);
    if (input.generation !== undefined && input.generation !== rp.generation) {
      throw conflictGeneration(rp, input.generation);
    }
    const name = input.name === undefined ? rp.name : checkName(input.name);
    if (name !== rp.name && this.names.has(name))
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
        const np = this.provider(input.parentProviderUuid);
        for (let a: ResourceProvider | undefined = np; a;) {
          if (a.uuid === rp.uuid) throw movedUnderDescendant(rp.uuid, np.uuid);
          a = a.parentProviderUuid ? this.providers.get(a.parentProviderUuid) : undefined;
        }
        parent = np.uuid;
        root = np.rootProviderUuid;
      }
    }
    this.names.delete(rp.name);
    this.names.set(name, rp.uuid);
    this.providers.set(rp.uuid, {
      ...rp,
      name,
      parentProviderUuid: parent,
      rootProviderUuid: root,
    });
    if (root !== rp.rootProviderUuid) this.reroot(rp.uuid, root);
    return { ...this.providers.get(rp.uuid)! };
  }

  /** Gives the subtree under `uuid` the root `root`. */
  private reroot(uuid: string, root: string): void {
    const stack = [uuid];
    while (stack.length) {
      const u = stack.pop()!;
      for (const c of this.providers.values()) {
        if (c.parentProviderUuid === u) {
          this.providers.set(c.uuid, { ...c, rootProviderUuid: root });
          stack.push(c.uuid);
        }
      }
    }
  }

  async deleteProvider(uuid: string): Promise<void> {
    this.open();
    const rp = this.provider(uuid);
    for (const p of this.providers.values()) {
      if (p.parentProviderUuid === rp.uuid) throw providerHasChildren(rp.uuid, p.uuid);
    }
    if ((this.byProvider.get(rp.uuid)?.size ?? 0) > 0) throw providerInUse(rp.uuid);
    this.providers.delete(rp.uuid);
    this.names.delete(rp.name);
    this.inventories.delete(rp.uuid);
    this.traits.delete(rp.uuid);
    this.aggregates.delete(rp.uuid);
    this.byProvider.delete(rp.uuid);
  }

  async getInventories(uuid: string): Promise<ProviderInventories> {
    this.open();
    const rp = this.provider(uuid);
    return { generation: rp.generation, inventories: { ...(this.inventories.get(rp.uuid) ?? {}) } };
  }

  async setInventories(
    uuid: string,
    input: { generation: number; inventories: Record<string, InventoryInput> },
  ): Promise<ProviderInventories> {
    const rp = this.provider(uuid);
    const result = this.write(
      { inventories: { [rp.uuid]: input } },
      { allowOvercommittedInventories: true },
    );
    return {
      generation: result.providerGenerations[rp.uuid]!,
      inventories: { ...(this.inventories.get(rp.uuid) ?? {}) },
    };
  }

  async getTraits(uuid: string): Promise<{ generation: number; traits: string[] }> {
    this.open();
    const rp = this.provider(uuid);
    return { generation: rp.generation, traits: [...(this.traits.get(rp.uuid) ?? [])].sort() };
  }

  async setTraits(
    uuid: string,
    input: { generation: number; traits: string[] },
  ): Promise<{ generation: number; traits: string[] }> {
    this.open();
    const rp = this.provider(uuid);
    if (input.generation !== rp.generation) throw conflictGeneration(rp, input.generation);
    checkTraits(input.traits, this.standardTraits, (t) => this.customTraits.has(t));
    this.traits.set(rp.uuid, new Set(input.traits));
    this.providers.set(rp.uuid, { ...rp, generation: rp.generation + 1 });
    return { generation: rp.generation + 1, traits: [...input.traits].sort() };
  }

  async listTraits(filter: TraitFilter = {}): Promise<string[]> {
    this.open();
    const used = new Set<string>();
    for (const set of this.traits.values()) for (const t of set) used.add(t);
    const names = new Set<string>(this.customTraits);
    for (const t of this.standardTraits ?? used) names.add(t);
    return byAssociation(names, used, filter.associated).sort();
  }

  async deleteTrait(name: string): Promise<void> {
    this.open();
    checkDeletableTrait(name, this.standardTraits, (t) => this.customTraits.has(t));
    for (const set of this.traits.values()) if (set.has(name)) throw traitInUse(name);
    this.customTraits.delete(name);
  }

  async createTrait(name: string): Promise<boolean> {
    this.open();
    checkCustomName(name, 'trait');
    if (this.customTraits.has(name)) return false;
    this.customTraits.add(name);
    return true;
  }

  async listResourceClasses(): Promise<string[]> {
    this.open();
    return [...STANDARD_RESOURCE_CLASSES, ...[...this.customClasses].sort()];
  }

  async createResourceClass(name: string): Promise<boolean> {
    this.open();
    checkCustomName(name, 'resource class');
    if (this.customClasses.has(name)) return false;
    this.customClasses.add(name);
    return true;
  }

  async deleteResourceClass(name: string): Promise<void> {
    this.open();
    checkResourceClassName(name);
    if (!this.customClasses.has(name)) throw resourceClassNotFound(name);
    for (const [rp, inv] of this.inventories) {
      if (inv[name]) throw resourceClassInUse(name, rp);
    }
    this.customClasses.delete(name);
  }

  async renameResourceClass(from: string, to: string): Promise<void> {
    this.open();
    checkResourceClassName(from);
    checkCustomName(to, 'resource class');
    if (!this.customClasses.has(from)) throw resourceClassNotFound(from);
    if (this.customClasses.has(to)) throw resourceClassExists(to);
    for (const inv of this.inventories.values()) {
      if (!(from in inv)) continue;
      inv[to] = inv[from]!;
      delete inv[from];
    }
    // `byProvider` indexes these same row objects: renaming them here renames them there.
    for (const rows of this.allocations.values()) {
      for (const r of rows) if (r.rc === from) r.rc = to;
    }
    this.customClasses.delete(from);
    this.customClasses.add(to);
  }

  async getAllocations(consumer: string): Promise<ConsumerAllocations | undefined> {
    this.open();
    return this.consumerView(normalizeUuid(consumer, 'consumer uuid'));
  }

  async setAllocations(consumer: string, input: AllocationsInput): Promise<ConsumerAllocations> {
    const uuid = normalizeUuid(consumer, 'consumer uuid');
    this.write({ allocations: { [uuid]: input } });
    return this.consumerView(uuid) ?? deletedConsumer(input);
  }

  async deleteAllocations(
    consumer: string,
    options: { consumerGeneration?: number } = {},
  ): Promise<void> {
    this.open();
    const uuid = normalizeUuid(consumer, 'consumer uuid');
    const row = this.consumers.get(uuid);
    if (!row) throw consumerNotFound(uuid);
    this.write(
      {
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
      },
      { keepGenerationsOnRemoval: true },
    );
  }

  async getProviderAllocations(
    uuid: string,
  ): Promise<{ generation: number; allocations: Record<string, Resources> }> {
    this.open();
    const rp = this.provider(uuid);
    const out: Record<string, Resources> = {};
    for (const [consumer, rows] of this.byProvider.get(rp.uuid) ?? []) {
      const r: Resources = {};
      for (const row of rows) r[row.rc] = row.used;
      out[consumer] = r;
    }
    return { generation: rp.generation, allocations: out };
  }

  async getUsages(uuid: string): Promise<{ generation: number; usages: Resources }> {
    this.open();
    const rp = this.provider(uuid);
    const usages: Resources = {};
    for (const rc of Object.keys(this.inventories.get(rp.uuid) ?? {})) usages[rc] = 0;
    for (const [rc, n] of this.usageOf(rp.uuid)) usages[rc] = n;
    return { generation: rp.generation, usages };
  }

  async getTotalUsages(filter: { projectId: string; userId?: string }): Promise<TotalUsages> {
    this.open();
    const rows: { consumer: string; consumerType: string | null; rc: string; used: number }[] = [];
    for (const [consumer, row] of this.consumers) {
      if (row.projectId !== filter.projectId) continue;
      if (filter.userId !== undefined && row.userId !== filter.userId) continue;
      for (const r of this.allocations.get(consumer) ?? [])
        rows.push({ consumer, consumerType: row.consumerType, rc: r.rc, used: r.used });
    }
    return totalUsages(rows);
  }

  /** Every provider with what the candidate search reads, copied synchronously (one state). */
  async candidateSnapshot(): Promise<CandidateSnapshot> {
    this.open();
    const snap = emptySnapshot([...this.providers.values()].map((p) => ({ ...p })));
    for (const p of snap.providers) {
      snap.inventories.set(p.uuid, { ...(this.inventories.get(p.uuid) ?? {}) });
      snap.usages.set(p.uuid, Object.fromEntries(this.usageOf(p.uuid)));
      snap.traits.set(p.uuid, [...(this.traits.get(p.uuid) ?? [])].sort());
      snap.aggregates.set(p.uuid, [...(this.aggregates.get(p.uuid) ?? [])]);
    }
    return snap;
  }

  async getAggregates(uuid: string): Promise<{ generation: number; aggregates: string[] }> {
    this.open();
    const rp = this.provider(uuid);
    return { generation: rp.generation, aggregates: [...(this.aggregates.get(rp.uuid) ?? [])] };
  }

  async setAggregates(
    uuid: string,
    input: { generation?: number; aggregates: string[] },
  ): Promise<{ generation: number; aggregates: string[] }> {
    this.open();
    const rp = this.provider(uuid);
    if (input.generation !== undefined && input.generation !== rp.generation)
      throw conflictGeneration(rp, input.generation);
    const list = checkAggregates(input.aggregates);
    this.aggregates.set(rp.uuid, list);
    const generation = input.generation === undefined ? rp.generation : rp.generation + 1;
    this.providers.set(rp.uuid, { ...rp, generation });
    return { generation, aggregates: [...list] };
  }

  async getAllocationsForProviderTree(
    rootUuid: string,
  ): Promise<Record<string, ConsumerAllocations>> {
    this.open();
    const out: Record<string, ConsumerAllocations> = {};
    for (const rp of this.treeOf(rootUuid)) {
      for (const consumer of this.byProvider.get(rp.uuid)?.keys() ?? []) {
        out[consumer] ??= this.consumerView(consumer)!;
      }
    }
    return out;
  }

  async reshape(req: ReshapeRequest): Promise<ReshapeResult> {
    return this.write(req, { reshapeGenerations: true });
  }

  async checkReshape(req: ReshapeRequest): Promise<ReshapeReport> {
    this.open();
    const prepared = prepare(req);
    const snap = this.snapshot(prepared);
    return buildReport(snap, prepared.req, plan(snap, prepared.req, { collect: true }));
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.closed = true;
  }
}
