/**
 * The allocation-candidate search over a {@link CandidateSnapshot}, with Placement's semantics:
 * each group's partial answers are anchored at the root of the tree they serve (a sharing
 * provider serves every tree of its aggregates), the groups' answers are combined per anchor,
 * filtered by group policy and same_subtree, and checked again for capacity once merged.
 */
import {
  capacityOf,
  fitsInventory,
  type Inventory,
  type ResourceProvider,
  type Resources,
} from './model.js';
import type {
  AllocationRequest,
  CandidateGroup,
  CandidateSnapshot,
  Candidates,
  ProviderSummary,
} from './candidates-types.js';

/** The trait that lets a provider's inventory serve the trees of its aggregates. */
export const SHARING_TRAIT = 'MISC_SHARES_VIA_AGGREGATE';

/** Checked options of one search. */
export interface SearchOptions {
  /** The unnumbered group, if it has resources. */
  unnumbered: CandidateGroup | undefined;
  /** Suffixed groups, in request order. */
  groups: [string, CandidateGroup][];
  groupPolicy: 'none' | 'isolate';
  rootRequired: string[];
  rootForbidden: string[];
  sameSubtree: string[][];
  nested: boolean;
  limit: number | undefined;
  maxPerTree: number;
  /** At most this many merged combinations are examined in all. */
  maxCombinations: number;
}

/** One provider's part of a partial answer. */
interface Part {
  provider: string;
  resourceClass: string;
  amount: number;
}

/** A partial answer: one group's way, anchored at the root of the tree it serves. */
interface Partial {
  anchor: string;
  sameProvider: boolean;
  parts: Part[];
  /** The group's suffix (`''`: unnumbered). */
  suffix: string;
  /** The providers the group uses, sorted (its mapping). */
  providers: string[];
  /** Every provider it uses is a sharing one (so other anchors may yield the same request). */
  onlySharing: boolean;
}

/** A provider's inventory of one class, with the amount used of it. */
interface Stock {
  rc: string;
  uuid: string;
  root: string;
  inv: Inventory;
  used: number;
}

const NONE: ReadonlySet<string> = new Set();

/** What the search needs of one provider. */
interface Info {
  provider: ResourceProvider;
  traits: ReadonlySet<string>;
  aggregates: ReadonlySet<string>;
  /** One per class of its inventories, in their order. */
  stock: Stock[];
}

/** The snapshot indexed for the search. */
class Index {
  /** Per provider uuid, in the snapshot's order. */
  readonly info = new Map<string, Info>();
  readonly members = new Map<string, Set<string>>();
  readonly sharing = new Set<string>();
  /** Per class, every provider with an inventory of it, in the snapshot's order. */
  readonly stock = new Map<string, Stock[]>();
  readonly hasTrees: boolean;
  private readonly anchorCache = new Map<string, Set<string>>();

  constructor(readonly snap: CandidateSnapshot) {
    let nested = false;
    for (const p of snap.providers) {
      const u = p.uuid;
      if (p.parentProviderUuid !== null) nested = true;
      const traitList = snap.traits.get(u);
      const traits = traitList?.length ? new Set(traitList) : NONE;
      if (traits.has(SHARING_TRAIT)) this.sharing.add(u);
      const aggList = snap.aggregates.get(u);
      const aggregates = aggList?.length ? new Set(aggList) : NONE;
      for (const a of aggregates) {
        let m = this.members.get(a);
        if (!m) this.members.set(a, (m = new Set()));
        m.add(u);
      }
      const inventories = snap.inventories.get(u);
      const stock: Stock[] = [];
      if (inventories) {
        const usages = snap.usages.get(u);
        for (const rc in inventories) {
          const entry: Stock = {
            rc,
            uuid: u,
            root: p.rootProviderUuid,
            inv: inventories[rc]!,
            used: usages?.[rc] ?? 0,
          };
          stock.push(entry);
          let list = this.stock.get(rc);
          if (!list) this.stock.set(rc, (list = []));
          list.push(entry);
        }
      }
      this.info.set(u, { provider: p, traits, aggregates, stock });
    }
    this.hasTrees = nested;
  }

  rootOf(uuid: string): string {
    return this.info.get(uuid)!.provider.rootProviderUuid;
  }

  traitsOf(uuid: string): ReadonlySet<string> {
    return this.info.get(uuid)!.traits;
  }

  /** Providers (of `treeRoot`'s tree when given) with room for `amount` of `rc`. */
  withResource(rc: string, amount: number, treeRoot: string | undefined): Set<string> {
    const out = new Set<string>();
    for (const s of this.stock.get(rc) ?? []) {
      if (treeRoot !== undefined && s.root !== treeRoot) continue;
      if (fitsInventory(s.inv, s.used, amount)) out.add(s.uuid);
    }
    return out;
  }

  /** Providers in at least one aggregate of every list. */
  inAggregates(memberOf: string[][]): Set<string> {
    const out = new Set<string>();
    for (const p of this.snap.providers) {
      const aggs = this.info.get(p.uuid)!.aggregates;
      if (memberOf.every((anyOf) => anyOf.some((a) => aggs.has(a)))) out.add(p.uuid);
    }
    return out;
  }

  /** Providers in any of these aggregates. */
  inAnyAggregate(aggregates: string[]): Set<string> {
    const out = new Set<string>();
    for (const a of aggregates) for (const p of this.members.get(a) ?? []) out.add(p);
    return out;
  }

  /** The roots of every tree that shares an aggregate with a sharing provider (not to be changed). */
  anchorsOf(sharing: string): Set<string> {
    let out = this.anchorCache.get(sharing);
    if (out) return out;
    out = new Set<string>();
    for (const a of this.info.get(sharing)!.aggregates)
      for (const m of this.members.get(a) ?? []) out.add(this.rootOf(m));
    this.anchorCache.set(sharing, out);
    return out;
  }

  /** The provider and its ancestors. */
  lineage(uuid: string): Set<string> {
    const out = new Set<string>();
    for (
      let u: string | null | undefined = uuid;
      u;
      u = this.info.get(u)?.provider.parentProviderUuid
    )
      out.add(u);
    return out;
  }
}

/** Computes the candidates of a checked query over a snapshot. */
export function searchCandidates(snap: CandidateSnapshot, options: SearchOptions): Candidates {
  const index = new Index(snap);
  const empty: Candidates = { allocationRequests: [], summaries: new Map() };

  let anchors: Set<string> | undefined;
  if (options.rootRequired.length || options.rootForbidden.length) {
    anchors = new Set();
    for (const p of snap.providers) {
      if (p.parentProviderUuid !== null) continue;
      const t = index.traitsOf(p.uuid);
      if (
        options.rootRequired.every((r) => t.has(r)) &&
        !options.rootForbidden.some((f) => t.has(f))
      )
        anchors.add(p.uuid);
    }
    if (anchors.size === 0) return empty;
  }

  const bySuffix = new Map<string, Partial[]>();
  const all: [string, CandidateGroup, boolean][] = [
    ...(options.unnumbered
      ? [['', options.unnumbered, false] as [string, CandidateGroup, boolean]]
      : []),
    ...options.groups.map(([s, g]): [string, CandidateGroup, boolean] => [s, g, true]),
  ];
  for (const [suffix, group, sameProvider] of all) {
    const found = sameProvider
      ? singleProvider(index, suffix, group, anchors)
      : acrossTree(index, suffix, group, anchors, options.maxPerTree);
    if (found.length === 0) return empty;
    bySuffix.set(suffix, found);
  }

  const oneProviderPerTree = !options.nested && index.hasTrees;
  const keep = oneProviderPerTree
    ? (r: AllocationRequest) => {
        const providers = Object.keys(r.allocations);
        return new Set(providers.map((u) => index.rootOf(u))).size === providers.length;
      }
    : () => true;
  // Without `nested`, the summaries name the providers of every request, not only the first
  // `limit`: then every request is computed.
  const stopAt =
    options.limit !== undefined && !oneProviderPerTree ? options.limit : Number.POSITIVE_INFINITY;
  let requests = merge(index, bySuffix, options, keep, stopAt);
  let summaryProviders: Set<string> | undefined;
  if (oneProviderPerTree)
    summaryProviders = new Set(requests.flatMap((r) => Object.keys(r.allocations)));
  if (options.limit !== undefined && options.limit < requests.length)
    requests = requests.slice(0, options.limit);
  const inTrees = new Set<string>();
  for (const r of requests) for (const u in r.allocations) inTrees.add(index.rootOf(u));
  const summaries = new Map<string, ProviderSummary>();
  for (const p of snap.providers) {
    if (!inTrees.has(p.rootProviderUuid)) continue;
    if (summaryProviders && !summaryProviders.has(p.uuid)) continue;
    const resources: ProviderSummary['resources'] = {};
    for (const s of index.info.get(p.uuid)!.stock)
      resources[s.rc] = { capacity: capacityOf(s.inv), used: s.used };
    summaries.set(p.uuid, {
      provider: p,
      resources,
      traits: summaryTraitOrder([...index.traitsOf(p.uuid)]),
    });
  }
  return { allocationRequests: requests, summaries };
}

/**
 * A summary's traits as Placement lists them, in the order its traits were created: the
 * standard ones (synced when it starts) before every custom one; by name within each kind.
 */
function summaryTraitOrder(traits: string[]): string[] {
  const custom = (t: string) => (t.startsWith('CUSTOM_') ? 1 : 0);
  return traits.sort((a, b) => custom(a) - custom(b) || (a < b ? -1 : a > b ? 1 : 0));
}

function treeRootOf(index: Index, inTree: string | undefined): string | undefined | null {
  if (inTree === undefined) return undefined;
  return index.info.get(inTree)?.provider.rootProviderUuid ?? null;
}

/** A suffixed group: every resource from one provider that passes every filter itself. */
function singleProvider(
  index: Index,
  suffix: string,
  group: CandidateGroup,
  anchors: Set<string> | undefined,
): Partial[] {
  const resources = Object.entries(group.resources ?? {});
  const inAggs = group.memberOf?.length ? index.inAggregates(group.memberOf) : undefined;
  if (inAggs?.size === 0) return [];
  const treeRoot = treeRootOf(index, group.inTree);
  if (treeRoot === null) return [];
  const bad = index.inAnyAggregate(group.notMemberOf ?? []);
  const withResource = resources.map(([rc, amount]) => index.withResource(rc, amount, treeRoot));
  if (withResource.some((s) => s.size === 0)) return [];
  // As in Placement, a resourceless group matches only through required traits or aggregates.
  if (resources.length === 0 && !group.required?.length && !inAggs) return [];
  const out: Partial[] = [];
  const required = group.required ?? [];
  const forbidden = group.forbidden ?? [];
  // Providers in the snapshot's order: those with room for the first class, else every one.
  const candidates: Iterable<string> = withResource[0] ?? index.info.keys();
  for (const u of candidates) {
    const traits = index.traitsOf(u);
    if (!required.every((anyOf) => anyOf.some((t) => traits.has(t)))) continue;
    if (forbidden.some((t) => traits.has(t))) continue;
    if (inAggs && !inAggs.has(u)) continue;
    if (bad.has(u)) continue;
    if (!withResource.every((s) => s.has(u))) continue;
    const parts = resources.map(([resourceClass, amount]) => ({
      provider: u,
      resourceClass,
      amount,
    }));
    const own = index.rootOf(u);
    const providers = [u];
    const onlySharing = index.sharing.has(u);
    const partial = (anchor: string): Partial => ({
      anchor,
      sameProvider: true,
      parts,
      suffix,
      providers,
      onlySharing,
    });
    if (!anchors || anchors.has(own)) out.push(partial(own));
    if (index.sharing.has(u))
      for (const a of index.anchorsOf(u))
        if (a !== own && (!anchors || anchors.has(a))) out.push(partial(a));
  }
  return out;
}

/**
 * The unnumbered group: each class from a provider of the anchor's tree or from a sharing
 * provider of one of its aggregates; the providers chosen must have the required traits together.
 */
function acrossTree(
  index: Index,
  suffix: string,
  group: CandidateGroup,
  anchors: Set<string> | undefined,
  maxPerTree: number,
): Partial[] {
  const resources = Object.entries(group.resources ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
  const inAggs = group.memberOf?.length ? index.inAggregates(group.memberOf) : undefined;
  if (inAggs?.size === 0) return [];
  const treeRoot = treeRootOf(index, group.inTree);
  if (treeRoot === null) return [];
  const withResource = resources.map(([rc, amount]) => index.withResource(rc, amount, treeRoot));
  if (withResource.some((s) => s.size === 0)) return [];
  const bad = group.notMemberOf?.length ? index.inAnyAggregate(group.notMemberOf) : undefined;

  // Per anchor, per class (in `resources` order): the providers that may serve it.
  let found: Map<string, Set<string>[]> | undefined;
  for (let i = 0; i < resources.length; i++) {
    const hit = new Map<string, Set<string>>();
    const add = (u: string, a: string): void => {
      if (anchors && !anchors.has(a)) return;
      if (inAggs && !inAggs.has(u) && !inAggs.has(a)) return;
      if (bad && (bad.has(u) || bad.has(a))) return;
      if (found && !found.has(a)) return;
      let set = hit.get(a);
      if (!set) hit.set(a, (set = new Set()));
      set.add(u);
    };
    for (const u of withResource[i]!) add(u, index.rootOf(u));
    if (treeRoot === undefined)
      for (const s of withResource[i]!)
        if (index.sharing.has(s) && (!inAggs || inAggs.has(s)))
          for (const a of index.anchorsOf(s)) add(s, a);
    if (found) {
      for (const [a, sets] of found) {
        const more = hit.get(a);
        if (more) sets.push(more);
        else found.delete(a);
      }
    } else {
      found = new Map();
      for (const [a, set] of hit) found.set(a, [set]);
    }
    if (found.size === 0) return [];
  }

  const out: Partial[] = [];
  const required = group.required ?? [];
  const forbidden = group.forbidden ?? [];
  for (const anchor of [...(found ?? new Map<string, Set<string>[]>()).keys()].sort()) {
    const options = found!.get(anchor)!.map((set) => [...set].sort());
    eachPick(options, { left: maxPerTree }, (pick) => {
      const used = new Set(pick);
      const traits = new Set<string>();
      for (const u of used)
        for (const t of index.traitsOf(u)) {
          if (forbidden.includes(t)) return;
          traits.add(t);
        }
      if (!required.every((anyOf) => anyOf.some((t) => traits.has(t)))) return;
      const providers = [...used].sort();
      out.push({
        anchor,
        sameProvider: false,
        parts: resources.map(([resourceClass, amount], k) => ({
          provider: pick[k]!,
          resourceClass,
          amount,
        })),
        suffix,
        providers,
        onlySharing: providers.every((u) => index.sharing.has(u)),
      });
    });
  }
  return out;
}

/**
 * Combines one partial answer per group for each anchor, as Placement merges its groups, in
 * anchor order; stops after `stopAt` requests.
 */
function merge(
  index: Index,
  bySuffix: Map<string, Partial[]>,
  options: SearchOptions,
  keep: (r: AllocationRequest) => boolean,
  stopAt: number,
): AllocationRequest[] {
  const suffixes = [...bySuffix.keys()];
  const granular = suffixes.filter((s) => s !== '').length;
  const byAnchor = new Map<string, Partial[][]>();
  for (const [k, partials] of [...bySuffix.values()].entries())
    for (const p of partials) {
      let lists = byAnchor.get(p.anchor);
      if (!lists) byAnchor.set(p.anchor, (lists = suffixes.map(() => [])));
      lists[k]!.push(p);
    }
  const out: AllocationRequest[] = [];
  // Only a request of sharing providers alone can come from several anchors: a provider that
  // does not share serves its own tree only, and one anchor's picks give distinct requests.
  const seen = new Set<string>();
  const budget = { left: options.maxCombinations };
  const anchors = [...byAnchor.keys()].sort();
  for (const anchor of anchors) {
    if (out.length >= stopAt) break;
    const lists = byAnchor.get(anchor)!;
    if (lists.some((l) => l.length === 0)) continue;
    eachPick(lists, budget, (pick) => {
      if (out.length >= stopAt) return;
      const request = combine(index, pick, options, granular);
      if (!request || !keep(request)) return;
      if (pick.every((p) => p.onlySharing)) {
        const key = keyOf(request);
        if (seen.has(key)) return;
        seen.add(key);
      }
      out.push(request);
    });
  }
  return out;
}

/** Calls `visit` with every pick of one item per column, until `budget.left` picks were made. */
function eachPick<T>(
  columns: readonly T[][],
  budget: { left: number },
  visit: (pick: readonly T[]) => void,
): void {
  if (columns.length === 2) {
    // The common shape (unnumbered group and one suffixed group), without recursion.
    const pick: T[] = [columns[0]![0]!, columns[1]![0]!];
    for (const a of columns[0]!) {
      pick[0] = a;
      for (const b of columns[1]!) {
        if (budget.left <= 0) return;
        pick[1] = b;
        budget.left--;
        visit(pick);
      }
    }
    return;
  }
  const pick: T[] = [];
  const walk = (i: number): void => {
    if (budget.left <= 0) return;
    if (i === columns.length) {
      budget.left--;
      visit(pick);
      return;
    }
    for (const item of columns[i]!) {
      pick.push(item);
      walk(i + 1);
      pick.pop();
    }
  };
  walk(0);
}

function combine(
  index: Index,
  picks: readonly Partial[],
  options: SearchOptions,
  granular: number,
): AllocationRequest | undefined {
  if (options.groupPolicy === 'isolate') {
    const distinct = new Set<string>();
    for (const p of picks) if (p.sameProvider) distinct.add(p.providers[0]!);
    if (distinct.size !== granular) return undefined;
  }
  for (const same of options.sameSubtree) {
    const providers = new Set<string>();
    for (const p of picks)
      if (same.includes(p.suffix)) for (const u of p.providers) providers.add(u);
    if (providers.size <= 1) continue;
    let common: Set<string> | undefined;
    for (const u of providers) {
      const lineage = index.lineage(u);
      common = common ? new Set([...common].filter((x) => lineage.has(x))) : lineage;
    }
    if (![...providers].some((u) => common!.has(u))) return undefined;
  }
  const allocations: Record<string, Resources> = {};
  let summed = false;
  for (const p of picks)
    for (const part of p.parts) {
      const res = (allocations[part.provider] ??= {});
      const before = res[part.resourceClass];
      if (before === undefined) res[part.resourceClass] = part.amount;
      else {
        res[part.resourceClass] = before + part.amount;
        summed = true;
      }
    }
  // Each part alone was found to fit; only amounts that groups add up are checked again.
  if (summed)
    for (const u in allocations) {
      const res = allocations[u]!;
      for (const rc in res) {
        const s = index.info.get(u)!.stock.find((x) => x.rc === rc)!;
        if (s.used + res[rc]! > capacityOf(s.inv) || res[rc]! > s.inv.maxUnit) return undefined;
      }
    }
  const mappings: Record<string, string[]> = {};
  for (const p of picks) mappings[p.suffix] = p.providers.slice();
  return { allocations, mappings };
}

function keyOf(r: AllocationRequest): string {
  const parts = Object.entries(r.allocations)
    .flatMap(([u, res]) => Object.entries(res).map(([rc, n]) => `${u}/${rc}/${n}`))
    .sort();
  const maps = Object.entries(r.mappings)
    .map(([s, l]) => `${s}=${l.join(',')}`)
    .sort();
  return `${parts.join(';')}|${maps.join(';')}`;
}
