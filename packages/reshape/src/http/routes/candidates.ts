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
  const allocation_requests = c.allocationRequests.map((r) => {
    if (!at([1, 12]))
      return {
        allocations: Object.entries(r.allocations).map(([uuid, res]) => ({
          resource_provider: { uuid },
          resources: res,
        })),
      };
    const out: Obj = {
      allocations: Object.fromEntries(
        Object.entries(r.allocations).map(([uuid, res]) => [uuid, { resources: res }]),
      ),
    };
    if (at([1, 34])) out.mappings = r.mappings;
    return out;
  });
  const provider_summaries = dict<unknown>();
  for (const [uuid, sum] of c.summaries) {
    const res = dict<unknown>();
    for (const [rc, v] of Object.entries(sum.resources))
      if (at([1, 27]) || requestedClasses.has(rc)) res[rc] = v;
    const entry: Obj = { resources: res };
    if (at([1, 17])) entry.traits = sum.traits;
    if (at([1, 29])) {
      entry.parent_provider_uuid = sum.provider.parentProviderUuid;
      entry.root_provider_uuid = sum.provider.rootProviderUuid;
    }
    provider_summaries[uuid] = entry;
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
