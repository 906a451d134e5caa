/**
 * Allocation candidates (Placement's `GET /allocation_candidates`): the unnumbered group, suffixed
 * groups, sharing providers, aggregates, trait filters, root traits and same_subtree, computed over
 * a {@link CandidateSnapshot} of a {@link ReshapeStore}.
 */
import { positiveIntegerOption } from '@rigging/core';
import { ReshapeError } from './errors.js';
import { normalizeUuid, type Resources } from './model.js';
import type { ReshapeStore } from './store.js';
import { searchCandidates, type SearchOptions } from './candidates-search.js';
import {
  emptySnapshot,
  type CandidateGroup,
  type CandidateQuery,
  type CandidateSnapshot,
  type Candidates,
} from './candidates-types.js';

export type {
  AllocationRequest,
  CandidateGroup,
  CandidateQuery,
  CandidateSnapshot,
  Candidates,
  ProviderSummary,
} from './candidates-types.js';

/** The most suffixed groups one query may name. */
export const MAX_CANDIDATE_GROUPS = 64;
/** The most merged combinations one query examines. */
const MAX_COMBINATIONS = 100_000;

/** A store that can read a {@link CandidateSnapshot} consistently (in one transaction). */
export interface CandidateSnapshotSource {
  /** Every provider with its inventories, usages, traits and aggregates, at one point in time. */
  candidateSnapshot(): Promise<CandidateSnapshot>;
}

function hasSnapshot(store: ReshapeStore): store is ReshapeStore & CandidateSnapshotSource {
  return typeof (store as Partial<CandidateSnapshotSource>).candidateSnapshot === 'function';
}

/** Reads a snapshot through the store's ordinary reads (one provider at a time). */
async function readSnapshot(store: ReshapeStore): Promise<CandidateSnapshot> {
  if (hasSnapshot(store)) return store.candidateSnapshot();
  const providers = await store.listProviders();
  const snap = emptySnapshot(providers);
  for (const p of providers) {
    const [inv, use, traits, aggs] = await Promise.all([
      store.getInventories(p.uuid),
      store.getUsages(p.uuid),
      store.getTraits(p.uuid),
      store.getAggregates(p.uuid),
    ]);
    snap.inventories.set(p.uuid, inv.inventories);
    snap.usages.set(p.uuid, use.usages);
    snap.traits.set(p.uuid, traits.traits);
    snap.aggregates.set(p.uuid, aggs.aggregates);
  }
  return snap;
}

function invalid(message: string): never {
  throw new ReshapeError('reshape.invalid_input', message);
}

function strings(value: unknown, what: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v === ''))
    invalid(`${what} must be an array of non-empty strings`);
  return value as string[];
}

function lists(value: unknown, what: string): string[][] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) invalid(`${what} must be an array of arrays of strings`);
  return value.map((v: unknown) => {
    const list = strings(v, what);
    if (list.length === 0) invalid(`${what} must not contain an empty list`);
    return list;
  });
}

function checkGroup(group: CandidateGroup, name: string): CandidateGroup {
  const resources: Resources = {};
  for (const [rc, amount] of Object.entries(group.resources ?? {})) {
    if (!Number.isSafeInteger(amount) || amount < 1)
      invalid(`${name}: the amount of ${rc} must be an integer >= 1, got ${String(amount)}`);
    resources[rc] = amount;
  }
  const aggs = (l: string[]) => l.map((a) => normalizeUuid(a, 'aggregate uuid'));
  const out: CandidateGroup = {
    resources,
    required: lists(group.required, `${name}.required`),
    forbidden: strings(group.forbidden, `${name}.forbidden`),
    memberOf: lists(group.memberOf, `${name}.memberOf`).map(aggs),
    notMemberOf: aggs(strings(group.notMemberOf, `${name}.notMemberOf`)),
  };
  if (group.inTree !== undefined) out.inTree = normalizeUuid(group.inTree, `${name}.inTree`);
  return out;
}

/** Checks a query and turns it into search options; throws `reshape.invalid_input`. */
export function checkCandidateQuery(query: CandidateQuery): SearchOptions {
  const maxPerTree = positiveIntegerOption(
    'allocationCandidates',
    'maxPerTree',
    query.maxPerTree,
    1000,
  );
  const limit = positiveIntegerOption('allocationCandidates', 'limit', query.limit);
  const unnumbered = checkGroup(query, 'query');
  const hasUnnumbered = Object.keys(unnumbered.resources!).length > 0;
  if (
    !hasUnnumbered &&
    (unnumbered.required!.length ||
      unnumbered.forbidden!.length ||
      unnumbered.memberOf!.length ||
      unnumbered.notMemberOf!.length)
  )
    invalid('the unnumbered group has filters but no resources');
  const groups = Object.entries(query.groups ?? {});
  if (groups.length > MAX_CANDIDATE_GROUPS)
    invalid(`at most ${MAX_CANDIDATE_GROUPS} suffixed groups may be given`);
  for (const [suffix] of groups)
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(suffix))
      invalid(`group suffix ${JSON.stringify(suffix)} must be 1 to 64 of A-Z a-z 0-9 _ -`);
  const checked = groups.map(([s, g]): [string, CandidateGroup] => [
    s,
    checkGroup(g, `groups.${s}`),
  ]);
  const sameSubtree = lists(query.sameSubtree, 'sameSubtree');
  const suffixes = new Set(groups.map(([s]) => s));
  for (const same of sameSubtree)
    for (const s of same)
      if (!suffixes.has(s)) invalid(`sameSubtree names no group ${JSON.stringify(s)}`);
  for (const [s, g] of checked)
    if (Object.keys(g.resources!).length === 0 && !sameSubtree.some((l) => l.includes(s)))
      invalid(`group ${JSON.stringify(s)} has no resources and is in no sameSubtree list`);
  if (!hasUnnumbered && !checked.some(([, g]) => Object.keys(g.resources!).length > 0))
    invalid('a query needs resources in at least one group');
  const policy = query.groupPolicy ?? 'none';
  if (policy !== 'none' && policy !== 'isolate')
    invalid(`groupPolicy must be 'none' or 'isolate', got ${JSON.stringify(policy)}`);
  return {
    unnumbered: hasUnnumbered ? unnumbered : undefined,
    groups: checked,
    groupPolicy: policy,
    rootRequired: strings(query.rootRequired, 'rootRequired'),
    rootForbidden: strings(query.rootForbidden, 'rootForbidden'),
    sameSubtree,
    nested: query.nested ?? true,
    limit,
    maxPerTree,
    maxCombinations: MAX_COMBINATIONS,
  };
}

/**
 * Every way to satisfy `query` with the store's providers now: the unnumbered group from one tree
 * and the sharing providers of its aggregates, each suffixed group from one provider, combined
 * per tree. Throws `reshape.invalid_input` for a malformed query, before reading anything.
 */
export async function allocationCandidates(
  store: ReshapeStore,
  query: CandidateQuery,
): Promise<Candidates> {
  const options = checkCandidateQuery(query);
  return searchCandidates(await readSnapshot(store), options);
}
