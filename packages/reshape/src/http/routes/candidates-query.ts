/** The query string of `GET /allocation_candidates` read into a {@link CandidateQuery}, per microversion. */
import {
  MAX_CANDIDATE_GROUPS,
  type CandidateGroup,
  type CandidateQuery,
} from '../../candidates.js';
import { TRAIT_NAME, isStandardResourceClass, isUuid, normalizeUuid } from '../../model.js';
import type { ReshapeStore } from '../../store.js';
import { HttpError } from '../errors.js';
import { atLeast, type Version } from '../microversion.js';
import { memberOfFilter, requiredFilter, resourcesFilter } from '../provider-filters.js';
import type { Validators } from '../schemas.js';

const PREFIX = /^(resources|required|member_of|in_tree)(.*)$/;

/** The query, and what the answer's shape needs beside it. */
export interface ParsedCandidates {
  query: CandidateQuery;
  /** Every requested resource class (the summaries show only these before 1.27). */
  requestedClasses: Set<string>;
}

function pyList(items: string[]): string {
  return `[${items.map((s) => `'${s}'`).join(', ')}]`;
}

/** Reads and checks the query string; throws a 400 {@link HttpError} as Placement does. */
export async function parseCandidatesQuery(
  params: URLSearchParams,
  version: Version,
  check: Validators,
  store: ReshapeStore,
): Promise<ParsedCandidates> {
  const at = (v: Version) => atLeast(version, v);
  // The keys first, as Placement's schema checks them (from 1.25 suffixed group keys too).
  const q = check.query('allocationCandidates', version, params) as {
    limit?: string;
    group_policy?: 'none' | 'isolate';
  };
  // The groups in the order the query string first names them, as Placement reads them.
  const order: string[] = [];
  const suffixes: string[] = [];
  for (const k of params.keys()) {
    const m = PREFIX.exec(k);
    if (!m || (m[2] !== '' && !at([1, 25]))) continue;
    if (!order.includes(m[2]!)) order.push(m[2]!);
    if (m[2] !== '' && !suffixes.includes(m[2]!)) suffixes.push(m[2]!);
  }
  if (suffixes.length > MAX_CANDIDATE_GROUPS)
    throw new HttpError(
      400,
      `Invalid query string parameters: at most ${MAX_CANDIDATE_GROUPS} request groups may be given`,
      'reshape.too_many_groups',
    );

  // Request-wide parameters, then the groups, then how the groups fit together; the traits and
  // classes named are looked up last, as Placement looks them up only when it searches.
  const query: CandidateQuery = {};
  const rootRequired = params.getAll('root_required');
  let rootTraits: { required: string[]; forbidden: string[] } | undefined;
  if (rootRequired.length && at([1, 35])) {
    if (rootRequired.length > 1)
      throw new HttpError(
        400,
        "Query parameter 'root_required' may be specified only once.",
        'placement.query.duplicate_key',
      );
    const names = rootRequired[0]!.split(',').map((t) => t.trim());
    const forbidden = names.filter((t) => t.startsWith('!')).map((t) => t.replace(/^!+/, ''));
    const required = names.filter((t) => !t.startsWith('!'));
    if ([...required, ...forbidden].some((t) => t === ''))
      throw new HttpError(
        400,
        `Invalid query string parameters: Expected 'root_required' parameter value of the form: HW_CPU_X86_VMX,!CUSTOM_MAGIC. Got an empty trait in: ${rootRequired[0]!}`,
        'placement.query.bad_value',
      );
    const conflicts = required.filter((t) => forbidden.includes(t));
    if (conflicts.length)
      throw new HttpError(
        400,
        `Conflicting required and forbidden traits found in root_required: ${conflicts.join(', ')}`,
        'placement.query.bad_value',
      );
    rootTraits = { required: [...new Set(required)], forbidden: [...new Set(forbidden)] };
  }
  const sameSubtree: string[][] = [];
  if (at([1, 36]))
    for (const value of params.getAll('same_subtree')) {
      const list = [...new Set(value.split(',').map((s) => s.trim()))];
      if (list.includes(''))
        throw new HttpError(
          400,
          'Empty string (unsuffixed group) can not be specified in `same_subtree` ',
          'placement.query.bad_value',
        );
      sameSubtree.push(list);
    }

  const namedTraits: string[] = [];
  const checkTraits = (names: string[]): string[] => {
    for (const t of names)
      if (!TRAIT_NAME.test(t) || t.length > 255)
        throw new HttpError(400, `Invalid query string parameters: bad trait '${t}'`);
    namedTraits.push(...names);
    return names;
  };
  const requestedClasses = new Set<string>();

  const readGroup = (suffix: string): CandidateGroup & { present: boolean } => {
    const group: CandidateGroup & { present: boolean } = { present: false };
    const resources = params.getAll(`resources${suffix}`);
    if (resources.length) {
      group.present = true;
      group.resources = resourcesFilter(resources.at(-1)!);
      for (const rc of Object.keys(group.resources)) requestedClasses.add(rc);
    }
    const required = params.getAll(`required${suffix}`);
    if (required.length && (suffix !== '' || at([1, 17]))) {
      group.present = true;
      const t = requiredFilter(required, version);
      group.required = t.required.map(checkTraits);
      group.forbidden = checkTraits(t.forbidden);
    }
    const memberOf = params.getAll(`member_of${suffix}`);
    if (memberOf.length && (suffix !== '' || at([1, 21]))) {
      group.present = true;
      const m = memberOfFilter(memberOf, version);
      group.memberOf = m.memberOf;
      group.notMemberOf = m.notMemberOf;
    }
    const inTree = params.getAll(`in_tree${suffix}`);
    if (inTree.length && at([1, 31])) {
      group.present = true;
      const raw = inTree.at(-1)!;
      if (!isUuid(raw))
        throw new HttpError(
          400,
          `Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: ${raw}`,
        );
      group.inTree = normalizeUuid(raw);
    }
    return group;
  };

  const groups: Record<string, CandidateGroup> = {};
  const all: [string, CandidateGroup & { present: boolean }][] = [];
  let unnumbered: (CandidateGroup & { present: boolean }) | undefined;
  for (const s of order) {
    const g = readGroup(s);
    if (s === '') {
      unnumbered = g;
      if (!g.present) continue;
    } else groups[s] = g;
    all.push([s, g]);
  }
  const hasResources = (g: CandidateGroup) => Object.keys(g.resources ?? {}).length > 0;

  if (at([1, 36])) {
    const resourceless = all.filter(([, g]) => !hasResources(g)).map(([s]) => s);
    if (resourceless.length === all.length)
      throw new HttpError(
        400,
        'There must be at least one resources or resources[$S] parameter.',
        'placement.query.missing_value',
      );
    const inSubtree = new Set(sameSubtree.flat());
    const bad = resourceless.filter((s) => !inSubtree.has(s));
    if (bad.length)
      throw new HttpError(
        400,
        `Resourceless suffixed group request should be specified in \`same_subtree\` query param: bad group(s) - ${pyList(bad)}.`,
        'placement.query.bad_value',
      );
    const known = all.map(([s]) => s);
    const unknown = [...inSubtree].filter((s) => !known.includes(s));
    if (unknown.length)
      throw new HttpError(
        400,
        `Real suffixes should be specified in \`same_subtree\`: ${pyList(unknown)} not found in ${pyList(known)}.`,
        'placement.query.bad_value',
      );
  } else {
    const orphans = (key: string, has: (g: CandidateGroup) => boolean) =>
      all.filter(([, g]) => !hasResources(g) && has(g)).map(([s]) => `${key}${s}`);
    const traitOrphans = orphans('required', (g) => (g.required ?? []).length > 0);
    if (traitOrphans.length)
      throw new HttpError(
        400,
        `All traits parameters must be associated with resources.  Found the following orphaned traits keys: ${traitOrphans.join(', ')}`,
      );
    const aggOrphans = orphans(
      'member_of',
      (g) => (g.memberOf ?? []).length > 0 || (g.notMemberOf ?? []).length > 0,
    );
    if (aggOrphans.length)
      throw new HttpError(
        400,
        `All member_of parameters must be associated with resources. Found the following orphaned member_of keys: ${aggOrphans.join(', ')}`,
      );
    if (!all.every(([, g]) => hasResources(g)))
      throw new HttpError(400, 'All request groups must specify resources.');
    if (all.length === 0)
      throw new HttpError(
        400,
        'At least one request group (`resources` or `resources{$S}`) is required.',
      );
  }
  if (at([1, 22])) {
    const conflicts: string[] = [];
    for (const [s, g] of all)
      for (const anyOf of g.required ?? [])
        if (anyOf.every((t) => (g.forbidden ?? []).includes(t)))
          conflicts.push(`required${s}: (${[...anyOf].sort().join(', ')})`);
    if (conflicts.length)
      throw new HttpError(
        400,
        `Conflicting required and forbidden traits found in the following traits keys: ${conflicts.sort().join(', ')}`,
      );
  }
  if (q.group_policy === undefined && suffixes.length > 1)
    throw new HttpError(
      400,
      'The "group_policy" parameter is required when specifying more than one "resources{N}" parameter.',
    );

  // What the search looks up: the classes, then the traits.
  const classesKnown = new Set(await store.listResourceClasses());
  for (const rc of requestedClasses)
    if (!classesKnown.has(rc) && !isStandardResourceClass(rc))
      throw new HttpError(
        400,
        `Invalid resource class in resources parameter: No such resource class ${rc}.`,
      );
  if (rootTraits) {
    query.rootRequired = checkTraits(rootTraits.required);
    query.rootForbidden = checkTraits(rootTraits.forbidden);
  }
  if (namedTraits.length) {
    const traitsKnown = new Set(await store.listTraits());
    const missing = [...new Set(namedTraits)].filter((t) => !traitsKnown.has(t));
    if (missing.length) throw new HttpError(400, `No such trait(s): ${missing.join(', ')}.`);
  }

  if (unnumbered) {
    const { present: _present, ...base } = unnumbered;
    Object.assign(query, base);
  }
  if (suffixes.length)
    query.groups = Object.fromEntries(
      Object.entries(groups).map(([s, g]) => {
        const { present: _p, ...rest } = g as CandidateGroup & { present: boolean };
        return [s, rest];
      }),
    );
  if (q.group_policy) query.groupPolicy = q.group_policy;
  if (sameSubtree.length) query.sameSubtree = sameSubtree;
  if (q.limit !== undefined) query.limit = Number(q.limit);
  query.nested = at([1, 29]);
  return { query, requestedClasses };
}
