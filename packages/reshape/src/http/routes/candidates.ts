/** `GET /allocation_candidates`. */
import { allocationCandidates, type Candidates } from '../../candidates.js';
import { atLeast, type Version } from '../microversion.js';
import { V, type Route, type Kit } from '../route.js';
import { type Obj } from '../serialize.js';
import { dict } from '../dict.js';
import { parseCandidatesQuery } from './candidates-query.js';

/**
 * The JSON body of `GET /allocation_candidates` at `version`; before 1.27 the summaries show
 * only `requestedClasses`. @internal
 */
export function candidatesBody(
  c: Candidates,
  version: Version,
  requestedClasses: Set<string>,
): Obj {
  const at = (v: Version) => atLeast(version, v);
  const dictForm = at([1, 12]);
  const withMappings = at([1, 34]);
  const allocation_requests = c.allocationRequests.map((r) => {
    if (!dictForm)
      return {
        allocations: Object.entries(r.allocations).map(([uuid, res]) => ({
          resource_provider: { uuid },
          resources: res,
        })),
      };
    // Provider uuids and class names were checked when stored: plain objects are safe here.
    const allocations: Obj = {};
    for (const uuid in r.allocations) allocations[uuid] = { resources: r.allocations[uuid] };
    return withMappings ? { allocations, mappings: r.mappings } : { allocations };
  });
  const allClasses = at([1, 27]);
  const withTraits = at([1, 17]);
  const withTree = at([1, 29]);
  const provider_summaries = dict<unknown>();
  for (const [uuid, sum] of c.summaries) {
    let res: Obj = sum.resources;
    if (!allClasses) {
      res = dict<unknown>();
      for (const [rc, v] of Object.entries(sum.resources))
        if (requestedClasses.has(rc)) res[rc] = v;
    }
    provider_summaries[uuid] = withTree
      ? {
          resources: res,
          traits: sum.traits,
          parent_provider_uuid: sum.provider.parentProviderUuid,
          root_provider_uuid: sum.provider.rootProviderUuid,
        }
      : withTraits
        ? { resources: res, traits: sum.traits }
        : { resources: res };
  }
  return { allocation_requests, provider_summaries };
}

/** @internal */
export function candidateRoutes({ store, check, call }: Kit): Route[] {
  return [
    {
      pattern: /^\/allocation_candidates$/,
      methods: {
        GET: {
          min: V(1, 10),
          handler: async ({ query: params, version }) => {
            const { query, requestedClasses } = await parseCandidatesQuery(
              params,
              version,
              check,
              store,
            );
            const c = await call(() => allocationCandidates(store, query));
            return { status: 200, body: candidatesBody(c, version, requestedClasses) };
          },
        },
      },
    },
  ];
}
