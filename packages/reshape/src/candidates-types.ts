/** The types of allocation-candidate queries and answers, shared by the search and the stores. */
import type { Inventory, ResourceProvider, Resources } from './model.js';

/**
 * One request group: what one part of a request needs. In the unnumbered group the resources may
 * come from several providers of one tree and from sharing providers of its aggregates; in a
 * suffixed group (`groups`) every resource comes from one provider.
 */
export interface CandidateGroup {
  /** The amount needed per resource class. A suffixed group may be resourceless. */
  resources?: Resources;
  /**
   * Every inner list is an any-of: at least one of its traits must be on a provider of the group
   * (the unnumbered group: on the providers it uses, together).
   */
  required?: string[][];
  /** No provider the group uses may have one of these traits. */
  forbidden?: string[];
  /**
   * Every inner list is an any-of of aggregate uuids; each list must be matched (the unnumbered
   * group: by the provider or the root of the tree it serves).
   */
  memberOf?: string[][];
  /** No provider the group uses (nor its tree's root, unnumbered) may be in these aggregates. */
  notMemberOf?: string[];
  /** Only providers of the tree containing this provider. */
  inTree?: string;
}

/** A request: the unnumbered group's fields, suffixed groups and request-wide options. */
export interface CandidateQuery extends CandidateGroup {
  /** Suffixed groups (`'1'`, `'_GPU'`, …), each satisfied by a single provider. */
  groups?: Record<string, CandidateGroup>;
  /**
   * `isolate`: no two suffixed groups use the same provider. @default 'none'
   */
  groupPolicy?: 'none' | 'isolate';
  /** The root of the tree of every candidate must have these traits. */
  rootRequired?: string[];
  /** The root of the tree of every candidate must have none of these traits. */
  rootForbidden?: string[];
  /**
   * Each list names suffixed groups whose providers must all sit in the subtree of one of them.
   */
  sameSubtree?: string[][];
  /**
   * Several providers of one tree may serve one candidate. `false` keeps only candidates that
   * take at most one provider per tree (Placement before 1.29). @default true
   */
  nested?: boolean;
  /** At most this many allocation requests are returned. @default unlimited */
  limit?: number;
  /** At most this many combinations are examined per tree and group. @default 1000 */
  maxPerTree?: number;
}

/** One way to satisfy a {@link CandidateQuery}. */
export interface AllocationRequest {
  /** The amounts to allocate, per provider uuid. */
  allocations: Record<string, Resources>;
  /** Per group suffix (`''` for the unnumbered group), the providers that satisfy it, sorted. */
  mappings: Record<string, string[]>;
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

/** The answer of `allocationCandidates`. */
export interface Candidates {
  /** Each: the providers and amounts of one way to satisfy the request. */
  allocationRequests: AllocationRequest[];
  /** The providers in play: every provider of a tree that serves a candidate. */
  summaries: Map<string, ProviderSummary>;
}

/**
 * Everything a candidate search reads, taken at one point in time: providers with their
 * inventories, usages, traits and aggregates.
 */
export interface CandidateSnapshot {
  /** Every provider. */
  providers: ResourceProvider[];
  /** Per provider uuid, its inventories per class (absent: none). */
  inventories: Map<string, Record<string, Inventory>>;
  /** Per provider uuid, the amount used per class (absent: none). */
  usages: Map<string, Resources>;
  /** Per provider uuid, its traits (absent: none). */
  traits: Map<string, string[]>;
  /** Per provider uuid, its aggregate uuids (absent: none). */
  aggregates: Map<string, string[]>;
}

/** A snapshot of `providers` with nothing else read yet. */
export function emptySnapshot(providers: ResourceProvider[]): CandidateSnapshot {
  return {
    providers,
    inventories: new Map(),
    usages: new Map(),
    traits: new Map(),
    aggregates: new Map(),
  };
}
