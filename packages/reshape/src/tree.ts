import { randomUUID } from 'node:crypto';
import { ReshapeError } from './errors.js';
import { normalizeInventory, normalizeUuid, type Inventory, type InventoryInput } from './model.js';
import type { ReshapeStore } from './store.js';

/** One provider of a {@link ProviderTree}. */
export interface TreeProvider {
  /** The provider's uuid, lower-case with dashes. */
  uuid: string;
  /** The provider's name, unique in the tree. */
  name: string;
  /** The parent's uuid; `null` for a root. */
  parentUuid: string | null;
  /** The generation read from the store; `null` for a provider not yet in the store. */
  generation: number | null;
  /** Inventories per resource class, with Placement's defaults filled in. */
  inventories: Record<string, Inventory>;
  /** Trait names, sorted, without duplicates. */
  traits: string[];
}

/** What changed from one tree to another (see {@link ProviderTree.diff}). */
export interface TreeDiff {
  /** Providers only in the new tree, parents first. */
  added: TreeProvider[];
  /** Providers only in the old tree, children first. */
  removed: TreeProvider[];
  /** Providers whose parent changed. */
  moved: {
    /** The provider. */
    uuid: string;
    /** The old parent's uuid; `null`: it was a root. */
    from: string | null;
    /** The new parent's uuid; `null`: it becomes a root. */
    to: string | null;
  }[];
  /** Providers whose name changed. */
  renamed: {
    /** The provider. */
    uuid: string;
    /** The old name. */
    from: string;
    /** The new name. */
    to: string;
  }[];
  /** Providers whose inventories changed, added providers with inventories included. */
  inventories: {
    /** The provider. */
    uuid: string;
    /** The old inventories, per resource class (empty for an added provider). */
    before: Record<string, Inventory>;
    /** The new inventories, per resource class. */
    after: Record<string, Inventory>;
  }[];
  /** Providers whose traits changed, added providers with traits included. */
  traits: {
    /** The provider. */
    uuid: string;
    /** The old trait names, sorted. */
    before: string[];
    /** The new trait names, sorted. */
    after: string[];
  }[];
}

function clone(p: TreeProvider): TreeProvider {
  const inventories: Record<string, Inventory> = {};
  for (const [rc, inv] of Object.entries(p.inventories)) inventories[rc] = { ...inv };
  return { ...p, inventories, traits: [...p.traits] };
}

export function sameInventories(
  a: Record<string, Inventory>,
  b: Record<string, Inventory>,
): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  if (ka.length !== kb.length || ka.some((k, i) => k !== kb[i])) return false;
  for (const k of ka) {
    const x = a[k]!;
    const y = b[k]!;
    if (
      x.total !== y.total ||
      x.reserved !== y.reserved ||
      x.minUnit !== y.minUnit ||
      x.maxUnit !== y.maxUnit ||
      x.stepSize !== y.stepSize ||
      x.allocationRatio !== y.allocationRatio
    )
      return false;
  }
  return true;
}

/**
 * An in-memory, copyable provider tree (or forest) that a driver edits: add, remove, move and
 * rename providers, set inventories and traits. Providers are addressed by uuid or name.
 */
export class ProviderTree {
  readonly #providers = new Map<string, TreeProvider>();

  /** Loads the tree containing `uuid` from a store (empty tree when it does not exist). */
  static async fromStore(store: ReshapeStore, uuid: string): Promise<ProviderTree> {
    const tree = new ProviderTree();
    if (!(await store.getProvider(uuid))) return tree;
    for (const p of await store.listProviders({ inTree: uuid })) {
      const [inv, traits] = await Promise.all([
        store.getInventories(p.uuid),
        store.getTraits(p.uuid),
      ]);
      tree.#providers.set(p.uuid, {
        uuid: p.uuid,
        name: p.name,
        parentUuid: p.parentProviderUuid,
        generation: Math.max(inv.generation, traits.generation),
        inventories: inv.inventories,
        traits: traits.traits,
      });
    }
    return tree;
  }

  #find(ref: string): TreeProvider | undefined {
    const direct = this.#providers.get(ref) ?? this.#providers.get(ref.toLowerCase());
    if (direct) return direct;
    for (const p of this.#providers.values()) if (p.name === ref) return p;
    return undefined;
  }

  #get(ref: string): TreeProvider {
    const p = this.#find(ref);
    if (!p)
      throw new ReshapeError('reshape.provider_not_found', `no provider ${ref} in the tree`, {
        details: { entity: 'provider', uuid: ref },
      });
    return p;
  }

  #add(
    name: string,
    parentUuid: string | null,
    uuid: string | undefined,
    generation: number | null,
  ): TreeProvider {
    const id = normalizeUuid(uuid ?? randomUUID(), 'provider uuid');
    if (this.#providers.has(id) || this.#find(name))
      throw new ReshapeError(
        'reshape.duplicate',
        `the tree already has a provider ${this.#providers.has(id) ? id : JSON.stringify(name)}`,
        { details: { uuid: id, name } },
      );
    const p: TreeProvider = { uuid: id, name, parentUuid, generation, inventories: {}, traits: [] };
    this.#providers.set(id, p);
    return clone(p);
  }

  /** Adds a root provider. `generation` is the store's, or null for a new provider. */
  newRoot(name: string, uuid?: string, generation: number | null = null): TreeProvider {
    return this.#add(name, null, uuid, generation);
  }

  /** Adds a child under `parent` (uuid or name). */
  newChild(name: string, parent: string, uuid?: string): TreeProvider {
    return this.#add(name, this.#get(parent).uuid, uuid, null);
  }

  /** Removes a provider and its whole subtree. */
  remove(ref: string): void {
    const p = this.#get(ref);
    for (const c of this.children(p.uuid)) this.remove(c.uuid);
    this.#providers.delete(p.uuid);
  }

  /** Moves a provider (with its subtree) under another parent, or makes it a root (`null`). */
  move(ref: string, parent: string | null): void {
    const p = this.#get(ref);
    if (parent === null) {
      p.parentUuid = null;
      return;
    }
    const np = this.#get(parent);
    for (
      let a: TreeProvider | undefined = np;
      a;
      a = a.parentUuid ? this.#providers.get(a.parentUuid) : undefined
    ) {
      if (a.uuid === p.uuid)
        throw new ReshapeError(
          'reshape.invalid_input',
          `cannot move ${p.uuid} under its own descendant`,
        );
    }
    p.parentUuid = np.uuid;
  }

  /**
   * Renames a provider (uuid or name).
   *
   * @throws {@link ReshapeError} `reshape.duplicate` when another provider has `name`,
   * `reshape.provider_not_found`.
   */
  rename(ref: string, name: string): void {
    const p = this.#get(ref);
    const other = this.#find(name);
    if (other && other.uuid !== p.uuid)
      throw new ReshapeError('reshape.duplicate', `the tree already has a provider named ${name}`);
    p.name = name;
  }

  /** Whether the tree has a provider with this uuid or name. */
  exists(ref: string): boolean {
    return this.#find(ref) !== undefined;
  }

  /** A copy of one provider's data. */
  data(ref: string): TreeProvider {
    return clone(this.#get(ref));
  }

  /** Replaces a provider's inventories (defaults filled in as Placement does). */
  updateInventory(ref: string, inventories: Record<string, InventoryInput>): void {
    const p = this.#get(ref);
    const out: Record<string, Inventory> = {};
    for (const [rc, inv] of Object.entries(inventories)) out[rc] = normalizeInventory(rc, inv);
    p.inventories = out;
  }

  /** True when `inventories` differ from the provider's current ones. */
  hasInventoryChanged(ref: string, inventories: Record<string, InventoryInput>): boolean {
    const out: Record<string, Inventory> = {};
    for (const [rc, inv] of Object.entries(inventories)) out[rc] = normalizeInventory(rc, inv);
    return !sameInventories(this.#get(ref).inventories, out);
  }

  /** Replaces a provider's traits (duplicates dropped, sorted). */
  updateTraits(ref: string, traits: readonly string[]): void {
    this.#get(ref).traits = [...new Set(traits)].sort();
  }

  /** Records the generation a flush left a provider at. */
  setGeneration(ref: string, generation: number): void {
    this.#get(ref).generation = generation;
  }

  /** Copies of the direct children of a provider (uuid or name). */
  children(ref: string): TreeProvider[] {
    const p = this.#get(ref);
    return [...this.#providers.values()].filter((c) => c.parentUuid === p.uuid).map(clone);
  }

  /** Copies of every root provider. */
  roots(): TreeProvider[] {
    return [...this.#providers.values()].filter((p) => p.parentUuid === null).map(clone);
  }

  /** Every provider, parents before children. */
  providers(): TreeProvider[] {
    const out: TreeProvider[] = [];
    const visit = (p: TreeProvider): void => {
      out.push(clone(p));
      for (const c of this.#providers.values()) if (c.parentUuid === p.uuid) visit(c);
    };
    for (const p of this.#providers.values()) if (p.parentUuid === null) visit(p);
    return out;
  }

  /** The number of providers in the tree. */
  get size(): number {
    return this.#providers.size;
  }

  /** A deep copy. */
  copy(): ProviderTree {
    const t = new ProviderTree();
    for (const [k, p] of this.#providers) t.#providers.set(k, clone(p));
    return t;
  }

  /** The changes that turn this tree into `other`. */
  diff(other: ProviderTree): TreeDiff {
    const d: TreeDiff = {
      added: [],
      removed: [],
      moved: [],
      renamed: [],
      inventories: [],
      traits: [],
    };
    for (const p of other.providers()) {
      const mine = this.#providers.get(p.uuid);
      if (!mine) {
        d.added.push(p);
        if (Object.keys(p.inventories).length)
          d.inventories.push({ uuid: p.uuid, before: {}, after: p.inventories });
        if (p.traits.length) d.traits.push({ uuid: p.uuid, before: [], after: p.traits });
        continue;
      }
      if (mine.parentUuid !== p.parentUuid)
        d.moved.push({ uuid: p.uuid, from: mine.parentUuid, to: p.parentUuid });
      if (mine.name !== p.name) d.renamed.push({ uuid: p.uuid, from: mine.name, to: p.name });
      if (!sameInventories(mine.inventories, p.inventories))
        d.inventories.push({ uuid: p.uuid, before: clone(mine).inventories, after: p.inventories });
      if (mine.traits.join(',') !== p.traits.join(','))
        d.traits.push({ uuid: p.uuid, before: [...mine.traits], after: p.traits });
    }
    const mineOrdered = this.providers();
    for (const p of mineOrdered.reverse()) if (!other.#providers.has(p.uuid)) d.removed.push(p);
    return d;
  }
}
