import { ReshapeError, type Problem } from './errors.js';
import { normalizeUuid } from './model.js';
import type { AllocationRow, ConsumerRow, NormalizedRequest, Plan, Snapshot } from './engine.js';
import type {
  AllocationMap,
  AllocationsInput,
  ConsumerAllocations,
  Inventory,
  InventoryInput,
  ProviderInventories,
  ReshapeRequest,
  ReshapeResult,
  ResourceProvider,
  Resources,
  TotalUsages,
} from './model.js';

/** Options every store takes (`memoryStore`, `sqlStore`). */
export interface StoreOptions {
  /**
   * The standard trait names. A trait exists only if it is one of these or a created `CUSTOM_*`
   * trait: `listTraits` lists exactly those, and `setTraits` (and every filter naming traits)
   * refuses any other name with `reshape.trait_not_found`, as Placement does.
   * @default STANDARD_TRAITS (os-traits' `get_traits()`, shipped with the package)
   */
  standardTraits?: Iterable<string>;
}

/** Filters of {@link ReshapeStore.listProviders}. */
export interface ProviderFilter {
  /** Only providers of the tree containing this provider. */
  inTree?: string;
  /** Only the provider with exactly this name. */
  name?: string;
  /** Only the provider with this uuid. */
  uuid?: string;
  /**
   * Only providers in at least one aggregate of each list (the lists are AND-ed, the aggregates
   * of one list OR-ed), as Placement's `member_of`.
   */
  memberOf?: string[][];
  /** Only providers in none of these aggregates (Placement's `member_of=!…`). */
  notMemberOf?: string[];
  /**
   * Only providers with at least one trait of each list (the lists are AND-ed, the traits of one
   * list OR-ed), as Placement's `required`.
   */
  requiredTraits?: string[][];
  /** Only providers with none of these traits (Placement's `required=!…`). */
  forbiddenTraits?: string[];
  /**
   * Only providers with room for each amount, as Placement's `resources`: an inventory of the
   * class with min_unit ≤ amount ≤ max_unit, amount a multiple of step_size, and usage + amount
   * at most (total − reserved) × allocation_ratio.
   */
  resources?: Resources;
}

/** Filters of {@link ReshapeStore.listTraits}. */
export interface TraitFilter {
  /** `true`: only traits some provider has; `false`: only traits no provider has. */
  associated?: boolean;
}

/** A new provider, for {@link ReshapeStore.createProvider}. */
export interface CreateProviderInput {
  /** Unique among providers; 1 to 200 characters. */
  name: string;
  /** @default a random UUID */
  uuid?: string;
  /** @default null (a new root) */
  parentProviderUuid?: string | null;
}

/** Changes to a provider, for {@link ReshapeStore.updateProvider}. */
export interface UpdateProviderInput {
  /** A new name, unique among providers; unchanged when omitted. */
  name?: string;
  /** Moves the provider (and its subtree) under another parent; `null` makes it a root. */
  parentProviderUuid?: string | null;
}

/** The outcome of {@link ReshapeStore.checkReshape} / `reshapeDryRun`: nothing is written. */
export interface ReshapeReport {
  /** True when the write would succeed. */
  ok: boolean;
  /** Every generation conflict, capacity or unit violation, in-use inventory, unknown name. */
  problems: Problem[];
  /** Providers whose inventories would change, before and after. */
  inventories: {
    /** The provider. */
    uuid: string;
    /** Its inventories now, per resource class. */
    before: Record<string, Inventory>;
    /** Its inventories after the write. */
    after: Record<string, Inventory>;
  }[];
  /** Consumers whose allocations would change, before and after. */
  allocations: {
    /** The consumer's uuid. */
    consumer: string;
    /** Its allocations now, per provider uuid. */
    before: AllocationMap;
    /** Its allocations after the write (empty: the consumer is deleted). */
    after: AllocationMap;
  }[];
  /** Usage per provider and class that would change. */
  usages: {
    /** The provider. */
    uuid: string;
    /** The resource class. */
    resourceClass: string;
    /** The amount used now. */
    before: number;
    /** The amount used after the write. */
    after: number;
  }[];
}

/**
 * Resource providers, inventories, traits, consumers and allocations. Every write is atomic and
 * checked (generations, capacity, min/max/step, in-use inventory).
 */
export interface ReshapeStore extends AsyncDisposable {
  /**
   * Creates a provider at generation 0, as a root or under an existing parent.
   *
   * @throws {@link ReshapeError} `reshape.duplicate` when the uuid or name is taken,
   * `reshape.provider_not_found` when the parent does not exist, `reshape.invalid_input`.
   */
  createProvider(input: CreateProviderInput): Promise<ResourceProvider>;
  /** A provider by uuid; `undefined` when it does not exist. */
  getProvider(uuid: string): Promise<ResourceProvider | undefined>;
  /** Providers ordered so that parents come before their children. */
  listProviders(filter?: ProviderFilter): Promise<ResourceProvider[]>;
  /** Renames or re-parents a provider; checked against `generation` when given. */
  updateProvider(
    uuid: string,
    input: UpdateProviderInput & { generation?: number },
  ): Promise<ResourceProvider>;
  /** Refuses a provider with children or allocations. */
  deleteProvider(uuid: string): Promise<void>;

  /**
   * A provider's inventories with its generation.
   *
   * @throws {@link ReshapeError} `reshape.provider_not_found`.
   */
  getInventories(uuid: string): Promise<ProviderInventories>;
  /** Replaces every inventory of a provider (generation-checked); returns the new state. */
  setInventories(
    uuid: string,
    input: { generation: number; inventories: Record<string, InventoryInput> },
  ): Promise<ProviderInventories>;

  /** A provider's traits, sorted, with its generation. */
  getTraits(uuid: string): Promise<{
    /** The provider generation the traits were read at. */
    generation: number;
    /** The trait names, sorted. */
    traits: string[];
  }>;
  /**
   * Replaces a provider's traits and bumps its generation.
   *
   * @throws {@link ReshapeError} `reshape.concurrent_update` when `generation` is not the
   * provider's, `reshape.trait_not_found` naming every trait that does not exist: a `CUSTOM_*`
   * trait not created yet or, with {@link StoreOptions.standardTraits}, a name not in that list.
   */
  setTraits(
    uuid: string,
    input: {
      /** The provider generation the caller last saw. */
      generation: number;
      /** The new trait names. */
      traits: string[];
    },
  ): Promise<{
    /** The provider's new generation. */
    generation: number;
    /** The trait names, sorted. */
    traits: string[];
  }>;
  /**
   * The traits that exist, sorted: with {@link StoreOptions.standardTraits}, those and the created
   * `CUSTOM_*` traits; without, the created `CUSTOM_*` traits and every trait a provider has.
   */
  listTraits(filter?: TraitFilter): Promise<string[]>;
  /**
   * Deletes a created `CUSTOM_*` trait. Throws `reshape.trait_not_found` when the trait does not
   * exist, `reshape.invalid_input` for a standard trait, `reshape.trait_in_use` when a provider
   * has it.
   */
  deleteTrait(name: string): Promise<void>;
  /** Creates a `CUSTOM_*` trait; false when it already existed. */
  createTrait(name: string): Promise<boolean>;

  /** The aggregates (uuids) a provider belongs to, sorted. */
  getAggregates(uuid: string): Promise<{
    /** The provider generation the aggregates were read at. */
    generation: number;
    /** The aggregate uuids, sorted. */
    aggregates: string[];
  }>;
  /**
   * Replaces a provider's aggregates. With `generation`, checked against it and the generation
   * is bumped (Placement 1.19+); without, neither (Placement before 1.19).
   */
  setAggregates(
    uuid: string,
    input: {
      /** The provider generation the caller last saw (Placement 1.19+). */
      generation?: number;
      /** The new aggregate uuids. */
      aggregates: string[];
    },
  ): Promise<{
    /** The provider's generation after the write. */
    generation: number;
    /** The aggregate uuids, sorted. */
    aggregates: string[];
  }>;

  /** Standard classes and the custom ones created. */
  listResourceClasses(): Promise<string[]>;
  /** Creates a `CUSTOM_*` class; false when it already existed. */
  createResourceClass(name: string): Promise<boolean>;
  /**
   * Deletes a custom resource class.
   *
   * @throws {@link ReshapeError} `reshape.resource_class_not_found` for a standard or unknown
   * class, `reshape.resource_class_in_use` while a provider has inventory of it.
   */
  deleteResourceClass(name: string): Promise<void>;
  /**
   * Renames a custom resource class in place: the inventories and allocations of `from` become
   * those of `to` (no provider or consumer generation changes, as in Placement, whose
   * inventories and allocations refer to a class by id).
   *
   * @throws {@link ReshapeError} `reshape.resource_class_not_found` for a standard or unknown
   * `from`, `reshape.duplicate` when `to` already exists, `reshape.invalid_input` when `to` is not
   * a `CUSTOM_*` name.
   */
  renameResourceClass(from: string, to: string): Promise<void>;

  /** A consumer's allocations; `undefined` when it has none. */
  getAllocations(consumer: string): Promise<ConsumerAllocations | undefined>;
  /** Replaces a consumer's allocations (empty allocations delete the consumer). */
  setAllocations(consumer: string, input: AllocationsInput): Promise<ConsumerAllocations>;
  /** Deletes a consumer's allocations; `reshape.consumer_not_found` when it has none. */
  deleteAllocations(consumer: string, options?: { consumerGeneration?: number }): Promise<void>;
  /** Allocations of every consumer on one provider. */
  getProviderAllocations(uuid: string): Promise<{
    /** The provider generation the allocations were read at. */
    generation: number;
    /** Amounts per resource class, per consumer uuid. */
    allocations: Record<string, Resources>;
  }>;
  /** Total usage per class on one provider (classes with inventory appear, possibly 0). */
  getUsages(uuid: string): Promise<{
    /** The provider generation the usages were read at. */
    generation: number;
    /** Amount used per resource class. */
    usages: Resources;
  }>;
  /** Usage of the consumers of a project (and user), in total and per consumer type. */
  getTotalUsages(filter: { projectId: string; userId?: string }): Promise<TotalUsages>;
  /**
   * Every consumer with an allocation on any provider of the tree rooted at (or containing)
   * `rootUuid`, with all its allocations, including those on providers outside the tree.
   */
  getAllocationsForProviderTree(rootUuid: string): Promise<Record<string, ConsumerAllocations>>;

  /**
   * In one transaction, replaces the inventories of every listed provider and the allocations
   * of every listed consumer. Any failed check throws and nothing is written.
   */
  reshape(req: ReshapeRequest): Promise<ReshapeResult>;
  /** Runs every check of {@link reshape} and reports, without writing. */
  checkReshape(req: ReshapeRequest): Promise<ReshapeReport>;

  /**
   * Closes the store; safe to call twice. The in-memory store refuses later calls; the SQL
   * store leaves its `Database` open (it belongs to the caller).
   */
  close(): Promise<void>;
}

function toMap(rows: readonly AllocationRow[]): AllocationMap {
  const out: AllocationMap = {};
  for (const r of rows) (out[r.rp] ??= {})[r.rc] = r.used;
  return out;
}

/** A consumer as `getAllocations` answers: its owner, generation, type (when set) and rows. */
export function consumerAllocations(
  c: ConsumerRow,
  rows: readonly AllocationRow[],
): ConsumerAllocations {
  return {
    projectId: c.projectId,
    userId: c.userId,
    consumerGeneration: c.generation,
    ...(c.consumerType === null ? {} : { consumerType: c.consumerType }),
    allocations: toMap(rows),
  };
}

/** Builds a report from a plan computed with `collect`. */
export function buildReport(snap: Snapshot, req: NormalizedRequest, p: Plan): ReshapeReport {
  const inventories: ReshapeReport['inventories'] = [];
  for (const [uuid, after] of p.inventories) {
    const before = snap.inventories.get(uuid) ?? {};
    if (JSON.stringify(sortKeys(before)) !== JSON.stringify(sortKeys(after))) {
      inventories.push({ uuid, before, after });
    }
  }
  const allocations: ReshapeReport['allocations'] = [];
  for (const [consumer, write] of p.consumers) {
    const before = toMap(snap.oldAllocations.get(consumer) ?? []);
    const after = toMap(write.rows);
    if (JSON.stringify(sortKeys(before)) !== JSON.stringify(sortKeys(after))) {
      allocations.push({ consumer, before, after });
    }
  }
  const usages: ReshapeReport['usages'] = [];
  for (const [uuid, classes] of p.usageDelta) {
    for (const [resourceClass, change] of classes) {
      if (change === 0) continue;
      const before = snap.usage.get(uuid)?.get(resourceClass) ?? 0;
      usages.push({ uuid, resourceClass, before, after: before + change });
    }
  }
  void req;
  return { ok: p.problems.length === 0, problems: p.problems, inventories, allocations, usages };
}

function sortKeys(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const object = value as Record<string, unknown>;
  // The default sort orders strings by UTF-16 code units, as `<` does.
  return Object.fromEntries(
    Object.keys(object)
      .sort()
      .map((key) => [key, sortKeys(object[key])]),
  );
}

/** Orders providers so that every parent precedes its children. */
export function parentsFirst(providers: ResourceProvider[]): ResourceProvider[] {
  const byUuid = new Map(providers.map((p) => [p.uuid, p]));
  const out: ResourceProvider[] = [];
  const seen = new Set<string>();
  const visit = (p: ResourceProvider): void => {
    if (seen.has(p.uuid)) return;
    seen.add(p.uuid);
    const parent = p.parentProviderUuid ? byUuid.get(p.parentProviderUuid) : undefined;
    if (parent) visit(parent);
    out.push(p);
  };
  for (const p of [...providers].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)))
    visit(p);
  return out;
}

/** Sums allocation rows of consumers into {@link TotalUsages}. */
export function totalUsages(
  rows: Iterable<{ consumer: string; consumerType: string | null; rc: string; used: number }>,
): TotalUsages {
  const out: TotalUsages = { usages: {}, consumerCount: 0, byConsumerType: {} };
  const seen = new Set<string>();
  const seenByType = new Map<string, Set<string>>();
  for (const r of rows) {
    const type = r.consumerType ?? 'unknown';
    const group = (out.byConsumerType[type] ??= { usages: {}, consumerCount: 0 });
    out.usages[r.rc] = (out.usages[r.rc] ?? 0) + r.used;
    group.usages[r.rc] = (group.usages[r.rc] ?? 0) + r.used;
    seen.add(r.consumer);
    let s = seenByType.get(type);
    if (!s) seenByType.set(type, (s = new Set()));
    s.add(r.consumer);
  }
  out.consumerCount = seen.size;
  for (const [type, s] of seenByType) out.byConsumerType[type]!.consumerCount = s.size;
  return out;
}

/** Checks a list of aggregate uuids (unique, normalized, sorted). */
export function checkAggregates(list: unknown): string[] {
  if (!Array.isArray(list))
    throw new ReshapeError('reshape.invalid_input', 'aggregates must be an array of uuids');
  const out = new Set<string>();
  for (const a of list) {
    const id = normalizeUuid(a, 'aggregate uuid');
    if (out.has(id))
      throw new ReshapeError('reshape.invalid_input', `aggregate ${id} is listed twice`, {
        details: { aggregate: id },
      });
    out.add(id);
  }
  return [...out].sort();
}

/** The aggregate, trait and resource filters of a {@link ProviderFilter}, checked. */
export interface CheckedFilter {
  memberOf: string[][];
  notMemberOf: string[];
  requiredTraits: string[][];
  forbiddenTraits: string[];
  /** `[resource class, amount]` pairs. */
  resources: [string, number][];
}

/** Checks the aggregate, trait and resource filters of a {@link ProviderFilter}. */
export function checkFilter(filter: ProviderFilter): CheckedFilter {
  const list = (value: unknown, what: string): unknown[] => {
    if (!Array.isArray(value))
      throw new ReshapeError('reshape.invalid_input', `${what} must be an array`);
    return value;
  };
  const uuids = (value: unknown): string[] => [
    ...new Set(list(value, 'aggregates').map((a) => normalizeUuid(a as string, 'aggregate uuid'))),
  ];
  const names = (value: unknown): string[] =>
    list(value, 'traits').map((t) => {
      if (typeof t !== 'string')
        throw new ReshapeError('reshape.invalid_input', `invalid trait name ${JSON.stringify(t)}`);
      return t;
    });
  const resources = Object.entries(filter.resources ?? {});
  for (const [rc, amount] of resources)
    if (!Number.isSafeInteger(amount) || amount < 1)
      throw new ReshapeError(
        'reshape.invalid_input',
        `the amount of ${rc} must be a positive integer, got ${JSON.stringify(amount)}`,
      );
  return {
    memberOf: list(filter.memberOf ?? [], 'memberOf').map(uuids),
    notMemberOf: uuids(filter.notMemberOf ?? []),
    requiredTraits: list(filter.requiredTraits ?? [], 'requiredTraits').map(names),
    forbiddenTraits: names(filter.forbiddenTraits ?? []),
    resources,
  };
}
