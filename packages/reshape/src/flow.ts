import {
  positiveIntegerOption,
  RiggingError,
  silentLogger,
  throwIfAborted,
  type Logger,
} from '@rigging/core';
import { ReshapeFailed, ReshapeNeeded } from './errors.js';
import type {
  AllocationsInput,
  ConsumerAllocations,
  InventoriesInput,
  ReshapeRequest,
} from './model.js';
import type { ReshapeReport, ReshapeStore } from './store.js';
import { ProviderTree, type TreeDiff } from './tree.js';

/** Allocations handed to a driver: consumer uuid → its complete allocations. Edit in place. */
export type TreeAllocations = Record<string, ConsumerAllocations>;

/** What the resource-tracker flow calls: a virt driver, in Nova's terms. */
export interface ProviderTreeDriver {
  /**
   * Edits `tree` to describe the hardware. Without `allocations`, throw {@link ReshapeNeeded}
   * when allocations must move; with them, move the allocations in place as well.
   */
  updateProviderTree(tree: ProviderTree, allocations?: TreeAllocations): void | Promise<void>;
}

/** Options of {@link updateProviderTree}. */
export interface UpdateProviderTreeOptions {
  /** The root provider (the compute node). */
  rootUuid: string;
  /** Name of the root when it does not exist yet. @default rootUuid */
  rootName?: string;
  /** True at service startup, the only time a reshape is allowed. @default false */
  startup?: boolean;
  /** @default silentLogger */
  logger?: Logger;
  /** Aborts before the tree is read and before it is flushed; rejects with its reason. */
  signal?: AbortSignal;
}

/** What {@link updateProviderTree} wrote. */
export interface UpdateProviderTreeResult {
  /** The tree as flushed, with the generations the store now has. */
  tree: ProviderTree;
  /** The changes from the stored tree to the driver's. */
  diff: TreeDiff;
  /** True when allocations were moved with a reshape. */
  reshaped: boolean;
  /** Consumers whose allocations were moved. */
  movedConsumers: string[];
}

function sameAllocations(a: ConsumerAllocations, b: ConsumerAllocations): boolean {
  const norm = (x: ConsumerAllocations): string =>
    JSON.stringify(
      Object.keys(x.allocations)
        .sort()
        .map((rp) => [
          rp,
          Object.entries(x.allocations[rp] ?? {}).sort(([p], [q]) => (p < q ? -1 : 1)),
        ])
        .filter(([, r]) => (r as unknown[]).length > 0),
    );
  return norm(a) === norm(b) && a.projectId === b.projectId && a.userId === b.userId;
}

function cloneAllocations(a: TreeAllocations): TreeAllocations {
  return structuredClone(a);
}

/**
 * The resource-tracker flow ("Handling Reshaped Provider Trees"): loads the tree of `rootUuid`,
 * lets the driver edit a copy, and flushes the differences to the store. When the driver throws
 * {@link ReshapeNeeded}: at startup, gathers the allocations of the tree, calls the driver again
 * with them and flushes inventories and allocations with one atomic `reshape` (a failure is
 * {@link ReshapeFailed}); outside startup, the `ReshapeNeeded` propagates (it is fatal).
 */
export async function updateProviderTree(
  store: ReshapeStore,
  driver: ProviderTreeDriver,
  options: UpdateProviderTreeOptions,
): Promise<UpdateProviderTreeResult> {
  const logger = options.logger ?? silentLogger;
  throwIfAborted(options.signal);
  const before = await ProviderTree.fromStore(store, options.rootUuid);
  if (before.size === 0)
    before.newRoot(options.rootName ?? options.rootUuid, options.rootUuid, null);
  let after = before.copy();
  let allocations: TreeAllocations | undefined;
  let original: TreeAllocations | undefined;
  try {
    await driver.updateProviderTree(after);
  } catch (error) {
    if (!(error instanceof ReshapeNeeded || RiggingError.hasCode(error, 'reshape.reshape_needed')))
      throw error;
    if (!options.startup) {
      logger.error({ err: error }, 'driver needs a reshape outside startup');
      throw error;
    }
    logger.info(
      { rootUuid: options.rootUuid },
      'driver asked for a reshape; gathering allocations',
    );
    original =
      before.exists(options.rootUuid) && before.data(options.rootUuid).generation !== null
        ? await store.getAllocationsForProviderTree(options.rootUuid)
        : {};
    allocations = cloneAllocations(original);
    after = before.copy();
    await driver.updateProviderTree(after, allocations);
  }
  throwIfAborted(options.signal);
  return flush(store, before, after, allocations, original, logger);
}

/**
 * The offline variant (the spec's upgrade script): the same flow, always allowed to reshape,
 * against a store opened directly on the database while the services are stopped.
 */
export function offlineReshape(
  store: ReshapeStore,
  driver: ProviderTreeDriver,
  options: Omit<UpdateProviderTreeOptions, 'startup'>,
): Promise<UpdateProviderTreeResult> {
  return updateProviderTree(store, driver, { ...options, startup: true });
}

async function flush(
  store: ReshapeStore,
  before: ProviderTree,
  after: ProviderTree,
  allocations: TreeAllocations | undefined,
  original: TreeAllocations | undefined,
  logger: Logger,
): Promise<UpdateProviderTreeResult> {
  const diff = before.diff(after);
  const generation = new Map<string, number>();
  for (const p of after.providers())
    if (p.generation !== null) generation.set(p.uuid, p.generation);

  for (const p of diff.added) {
    const created = await store.createProvider({
      uuid: p.uuid,
      name: p.name,
      parentProviderUuid: p.parentUuid,
    });
    generation.set(p.uuid, created.generation);
  }
  const renamedOrMoved = new Set([
    ...diff.moved.map((m) => m.uuid),
    ...diff.renamed.map((r) => r.uuid),
  ]);
  for (const uuid of renamedOrMoved) {
    const p = after.data(uuid);
    await store.updateProvider(uuid, { name: p.name, parentProviderUuid: p.parentUuid });
  }

  const inventories: Record<string, InventoriesInput> = {};
  for (const change of diff.inventories) {
    inventories[change.uuid] = {
      generation: generation.get(change.uuid)!,
      inventories: change.after,
    };
  }
  for (const p of diff.removed) {
    if (Object.keys(p.inventories).length && p.generation !== null)
      inventories[p.uuid] = { generation: p.generation, inventories: {} };
  }

  const moved: string[] = [];
  let reshaped = false;
  if (allocations && original) {
    const req: ReshapeRequest = { inventories, allocations: {} };
    for (const [consumer, a] of Object.entries(allocations)) {
      const old = original[consumer];
      if (old && sameAllocations(old, a)) continue;
      const input: AllocationsInput = {
        projectId: a.projectId,
        userId: a.userId,
        consumerGeneration: old ? old.consumerGeneration : null,
        allocations: a.allocations,
      };
      req.allocations![consumer] = input;
      moved.push(consumer);
    }
    for (const consumer of Object.keys(original)) {
      if (!(consumer in allocations)) {
        const old = original[consumer]!;
        req.allocations![consumer] = {
          projectId: old.projectId,
          userId: old.userId,
          consumerGeneration: old.consumerGeneration,
          allocations: {},
        };
        moved.push(consumer);
      }
    }
    try {
      const result = await store.reshape(req);
      for (const [uuid, g] of Object.entries(result.providerGenerations)) generation.set(uuid, g);
    } catch (cause) {
      throw new ReshapeFailed(
        `the reshape of ${Object.keys(inventories).length} providers and ${moved.length} consumers failed, nothing was moved: ${(cause as Error).message}`,
        { cause, details: { providers: Object.keys(inventories).length, consumers: moved.length } },
      );
    }
    reshaped = true;
    logger.info(
      { providers: Object.keys(inventories).length, consumers: moved.length },
      'reshaped',
    );
  } else {
    for (const [uuid, input] of Object.entries(inventories)) {
      const r = await store.setInventories(uuid, input);
      generation.set(uuid, r.generation);
    }
  }

  for (const change of diff.traits) {
    const r = await store.setTraits(change.uuid, {
      generation: generation.get(change.uuid)!,
      traits: change.after,
    });
    generation.set(change.uuid, r.generation);
  }
  for (const p of diff.removed) {
    await store.deleteProvider(p.uuid);
  }
  const tree = after.copy();
  for (const p of tree.providers()) {
    const g = generation.get(p.uuid);
    if (g !== undefined) tree.setGeneration(p.uuid, g);
  }
  return { tree, diff, reshaped, movedConsumers: moved };
}

/** Runs every check of a reshape and reports the diff and problems, without writing. */
export function reshapeDryRun(store: ReshapeStore, req: ReshapeRequest): Promise<ReshapeReport> {
  return store.checkReshape(req);
}

/** Options of {@link retryOnConflict}. */
export interface RetryOnConflictOptions {
  /** Total attempts. @default 3 */
  attempts?: number;
  /** Checked before every attempt; an aborted signal rejects with its reason. */
  signal?: AbortSignal;
}

/**
 * Reads with `refetch`, writes with `mutate`, and on `reshape.concurrent_update` reads again and
 * retries, up to `attempts` times in total; the last conflict propagates.
 */
export async function retryOnConflict<S, T>(
  refetch: () => Promise<S>,
  mutate: (state: S) => Promise<T>,
  options: RetryOnConflictOptions = {},
): Promise<T> {
  const attempts = positiveIntegerOption('retryOnConflict', 'attempts', options.attempts, 3);
  for (let attempt = 1; ; attempt++) {
    throwIfAborted(options.signal);
    const state = await refetch();
    try {
      return await mutate(state);
    } catch (error) {
      if (attempt >= attempts || !RiggingError.hasCode(error, 'reshape.concurrent_update'))
        throw error;
    }
  }
}
