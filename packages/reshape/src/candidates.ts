/**
 * Allocation candidates for one unnumbered request group (Placement's
 * `GET /allocation_candidates?resources=…&required=…&in_tree=…&limit=…`), computed over the
 * providers of a {@link ReshapeStore}.
 */
import { positiveIntegerOption } from '@rigging/core';
import {
  capacityOf,
  fitsInventory,
  type Inventory,
  type ResourceProvider,
  type Resources,
} from './model.js';
import type { ReshapeStore } from './store.js';

/** A request: amounts per class, trait constraints, optional tree and limit. */
export interface CandidateQuery {
  /** The amount needed per resource class. */
  resources: Resources;
  /** Every inner list is an any-of; all lists must be satisfied by the providers together. */
  required?: string[][];
  /** No provider of a candidate may have one of these traits. */
  forbidden?: string[];
  /** Only providers of the tree containing this provider. */
  inTree?: string;
  /** Resources of one request may come from several providers of one tree. @default true */
  nested?: boolean;
  /** At most this many allocation requests are returned, in the order found. @default unlimited */
  limit?: number;
  /** At most this many combinations are examined per tree. @default 1000 */
  maxPerTree?: number;
}

/** One provider in play in {@link Candidates}, with what it has and what is used. */
export interface ProviderSummary {
  /** The provider. */
  provider: ResourceProvider;
  /** Per resource class of its inventories. */
  resources: Record<
    string,
    {
      /** (total − reserved) × allocation ratio, rounded down. */
      capacity: number;
      /** The amount allocated now. */
      used: number;
    }
  >;
  /** Its trait names. */
  traits: string[];
}

/** The answer of {@link allocationCandidates}. */
export interface Candidates {
  /** Each: the providers and amounts of one way to satisfy the request. */
  allocationRequests: Record<string, Resources>[];
  /** The providers in play (every provider of a tree with a candidate when `nested`). */
  summaries: Map<string, ProviderSummary>;
}

/** Finds every way to place `query.resources` (each class from one provider) within one tree. */
export async function allocationCandidates(
  store: ReshapeStore,
  query: CandidateQuery,
): Promise<Candidates> {
  const nested = query.nested ?? true;
  const maxPerTree = positiveIntegerOption(
    'allocationCandidates',
    'maxPerTree',
    query.maxPerTree,
    1000,
  );
  const limit = positiveIntegerOption('allocationCandidates', 'limit', query.limit);
  const providers = await store.listProviders(
    query.inTree === undefined ? {} : { inTree: query.inTree },
  );
  const summaries = new Map<string, ProviderSummary>();
  const inventories = new Map<string, Record<string, Inventory>>();
  for (const p of providers) {
    const [inv, use, traits] = await Promise.all([
      store.getInventories(p.uuid),
      store.getUsages(p.uuid),
      store.getTraits(p.uuid),
    ]);
    inventories.set(p.uuid, inv.inventories);
    const resources: ProviderSummary['resources'] = {};
    for (const [rc, i] of Object.entries(inv.inventories))
      resources[rc] = { capacity: capacityOf(i), used: use.usages[rc] ?? 0 };
    summaries.set(p.uuid, { provider: p, resources, traits: traits.traits });
  }
  const trees = new Map<string, ResourceProvider[]>();
  for (const p of providers) {
    let list = trees.get(p.rootProviderUuid);
    if (!list) trees.set(p.rootProviderUuid, (list = []));
    list.push(p);
  }
  const classes = Object.keys(query.resources).sort();
  const fits = (uuid: string, rc: string, amount: number): boolean => {
    const inv = inventories.get(uuid)?.[rc];
    if (!inv) return false;
    return fitsInventory(inv, summaries.get(uuid)!.resources[rc]!.used, amount);
  };
  const traitsOk = (uuids: Iterable<string>): boolean => {
    const all = new Set<string>();
    for (const u of uuids)
      for (const t of summaries.get(u)!.traits) {
        if (query.forbidden?.includes(t)) return false;
        all.add(t);
      }
    return (query.required ?? []).every((anyOf) => anyOf.some((t) => all.has(t)));
  };

  const requests: Record<string, Resources>[] = [];
  const treesUsed = new Set<string>();
  const providersUsed = new Set<string>();
  for (const [root, members] of [...trees].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const options = classes.map((rc) =>
      members.filter((p) => fits(p.uuid, rc, query.resources[rc]!)).map((p) => p.uuid),
    );
    if (options.some((o) => o.length === 0)) continue;
    let examined = 0;
    const pick: string[] = [];
    const walk = (i: number): void => {
      if (examined >= maxPerTree) return;
      if (i === classes.length) {
        examined++;
        const used = new Set(pick);
        if (!nested && used.size > 1) return;
        if (!traitsOk(used)) return;
        const request: Record<string, Resources> = {};
        for (const [k, rc] of classes.entries())
          (request[pick[k]!] ??= {})[rc] = query.resources[rc]!;
        requests.push(request);
        treesUsed.add(root);
        for (const u of used) providersUsed.add(u);
        return;
      }
      for (const u of options[i]!) {
        pick.push(u);
        walk(i + 1);
        pick.pop();
      }
    };
    walk(0);
  }
  let kept = requests;
  if (limit !== undefined && limit < requests.length) {
    kept = requests.slice(0, limit);
    treesUsed.clear();
    providersUsed.clear();
    for (const r of kept)
      for (const u of Object.keys(r)) {
        providersUsed.add(u);
        treesUsed.add(summaries.get(u)!.provider.rootProviderUuid);
      }
  }
  const inPlay = new Map<string, ProviderSummary>();
  for (const [uuid, s] of summaries)
    if (nested ? treesUsed.has(s.provider.rootProviderUuid) : providersUsed.has(uuid))
      inPlay.set(uuid, s);
  return { allocationRequests: kept, summaries: inPlay };
}
